package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestAlertRulesInDocs parses docs/prometheus-alerts.yml and checks every
// rule's shape and that every metric its expression names is one nodeid-init
// serves (so a renamed metric cannot leave a silent alert behind).
func TestAlertRulesInDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "prometheus-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("docs/prometheus-alerts.yml: %v", err)
	}
	served := map[string]bool{}
	families, err := newMetrics().reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		served[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				served[f.GetName()+s] = true
			}
		}
	}
	metricRE := regexp.MustCompile(`\b(nodeid|go|process)_[a-z0-9_]+`)
	labelRE := regexp.MustCompile(`\{to="([^"]*)"\}`)
	seen := map[string]bool{}
	rules := 0
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			rules++
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %+v: want alert, expr, labels.severity and annotations.summary", r)
			}
			if seen[r.Alert] {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") || strings.Count(r.Expr, "[") != strings.Count(r.Expr, "]") {
				t.Errorf("%s: unbalanced expression %q", r.Alert, r.Expr)
			}
			names := metricRE.FindAllString(r.Expr, -1)
			if len(names) == 0 {
				t.Errorf("%s: names no nodeid metric: %q", r.Alert, r.Expr)
			}
			for _, n := range names {
				if !served[n] {
					t.Errorf("%s: metric %s is not served by nodeid-init", r.Alert, n)
				}
			}
			for _, m := range labelRE.FindAllStringSubmatch(r.Expr, -1) {
				if !contains(transitionLabels, m[1]) {
					t.Errorf("%s: to=%q is not a value of nodeid_lease_transitions_total", r.Alert, m[1])
				}
			}
		}
	}
	// The four the operator must have: lease flips, no holder, renewals
	// failing, self-fence.
	for _, want := range []string{"NodeidLeaseFlapping", "NodeidNoHolder", "NodeidRenewalsFailing", "NodeidSelfFenced"} {
		if !seen[want] {
			t.Errorf("alert %s missing", want)
		}
	}
	t.Logf("checked %d alert rules", rules)
}

func contains(set []string, v string) bool {
	for _, s := range set {
		if s == v {
			return true
		}
	}
	return false
}
