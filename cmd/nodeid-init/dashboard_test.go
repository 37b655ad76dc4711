package main_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// dashboardPanel is what the test reads of a Grafana panel; rows may nest
// panels.
type dashboardPanel struct {
	Title      string           `json:"title"`
	Type       string           `json:"type"`
	Datasource *json.RawMessage `json:"datasource"`
	Targets    []struct {
		Expr       string           `json:"expr"`
		Datasource *json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

// TestGrafanaDashboardUsesServedMetrics parses docs/grafana-dashboard.json
// and checks that every metric each panel's PromQL names is one a running
// nodeid-init serves on /metrics (scraped, not listed here), so a renamed
// metric cannot leave an empty panel behind.
func TestGrafanaDashboardUsesServedMetrics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		SchemaVersion int              `json:"schemaVersion"`
		Title         string           `json:"title"`
		UID           string           `json:"uid"`
		Panels        []dashboardPanel `json:"panels"`
		Templating    struct {
			List []struct {
				Name, Type string
				Query      any
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	if d.SchemaVersion < 36 || d.Title == "" || d.UID == "" {
		t.Errorf("schemaVersion %d, title %q, uid %q: want schemaVersion >= 36, a title and a uid", d.SchemaVersion, d.Title, d.UID)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		hasDS = hasDS || (v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus")
	}
	if !hasDS {
		t.Errorf("no Prometheus data source variable named datasource in templating: %+v", d.Templating.List)
	}

	served := servedMetrics(t)
	wantDS := map[string]any{"type": "prometheus", "uid": "${datasource}"}
	isDS := func(raw *json.RawMessage) bool {
		var v any
		return raw != nil && json.Unmarshal(*raw, &v) == nil && reflect.DeepEqual(v, wantDS)
	}
	var panels []dashboardPanel
	var flatten func([]dashboardPanel)
	flatten = func(ps []dashboardPanel) {
		for _, p := range ps {
			if p.Type != "row" {
				panels = append(panels, p)
			}
			flatten(p.Panels)
		}
	}
	flatten(d.Panels)
	used := map[string]bool{}
	for _, p := range panels {
		if !isDS(p.Datasource) {
			t.Errorf("panel %q: datasource is not %v", p.Title, wantDS)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource != nil && !isDS(tg.Datasource) {
				t.Errorf("panel %q: a target's datasource is not %v", p.Title, wantDS)
			}
			names := promqlMetricNames(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				used[n] = true
				if !served[n] {
					t.Errorf("panel %q: metric %s is not served by nodeid-init (%q)", p.Title, n, tg.Expr)
				}
			}
		}
	}
	t.Logf("checked %d panels, metrics used: %v", len(panels), keys(used))
}

// servedMetrics runs nodeid-init with its metrics endpoint until it holds
// a lease (some series exist only then) and returns every sample name of
// /metrics (histograms as their _bucket, _sum and _count).
func servedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	c := newCluster(t, s3test.NewFake(t), 1)
	addr := freeAddr(t)
	c.runTask("holder", "NODEID_METRICS_ADDR="+addr).identity(t, 20*time.Second)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	served := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			served[line[:i]] = true
		}
	}
	if !served["nodeid_lease_held"] {
		t.Fatalf("/metrics has no nodeid_lease_held:\n%s", truncate(string(body), 500))
	}
	return served
}

var (
	promqlStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promqlLabels   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true,
		"without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
)

// promqlMetricNames returns the metric names a PromQL expression selects:
// identifiers that are not functions, aggregations, keywords, label names
// (in matchers, grouping and vector matching) or string contents.
func promqlMetricNames(expr string) []string {
	s := promqlStrings.ReplaceAllString(expr, `""`)
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlLabels.ReplaceAllString(s, " ")
	var names []string
	for _, ix := range promqlIdent.FindAllStringIndex(s, -1) {
		name := s[ix[0]:ix[1]]
		if ix[0] > 0 && strings.ContainsAny(s[ix[0]-1:ix[0]], "0123456789.$") {
			continue // part of a number (1e3), a duration (5m) or a variable
		}
		if strings.HasPrefix(strings.TrimLeft(s[ix[1]:], " \t\n"), "(") || promqlKeywords[strings.ToLower(name)] {
			continue // a call, or a keyword
		}
		names = append(names, name)
	}
	return names
}

// The extractor itself: it must find every selector, and only those.
func TestPromQLMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum(nodeid_waiting)`: {"nodeid_waiting"},
		`histogram_quantile(0.99, sum by (le) (rate(nodeid_renewal_duration_seconds_bucket{job="x"}[$__rate_interval])))`: {"nodeid_renewal_duration_seconds_bucket"},
		`max(nodeid_cluster_size) - (count(count by (node_id) (nodeid_node_lease_version)) or vector(0))`:                 {"nodeid_cluster_size", "nodeid_node_lease_version"},
		`a * on (instance, job) group_left (node_id) (b > bool 0) unless c offset 5m`:                                     {"a", "b", "c"},
		`label_replace(up, "dst", "$1", "src", "(.*)") and 1e3 < count_values("v", x)`:                                    {"up", "x"},
		`changes((max by (node_id) (m))[5m:1m])`:                                                                          {"m"},
	} {
		if got := promqlMetricNames(expr); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %q, want %q", expr, got, want)
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
