package main

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeid/nodeid/nodeid"
)

// series returns the samples of one family as "label=value... value", sorted.
func series(t *testing.T, reg *prometheus.Registry, name string) []string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out = append(out, fmt.Sprintf("%s %g", strings.Join(labels, ","), m.GetGauge().GetValue()))
		}
	}
	sort.Strings(out)
	return out
}

// nodeid_node_lease_version carries the node ID as a label, so that holders
// can be counted per ID: one series while held, none after the tenure ends,
// and a new tenure of another ID does not leave the old one behind.
func TestNodeLeaseVersionFollowsTheTenure(t *testing.T) {
	m := newMetrics()
	const name = "nodeid_node_lease_version"
	check := func(when string, want ...string) {
		t.Helper()
		if got := series(t, m.reg, name); strings.Join(got, ";") != strings.Join(want, ";") {
			t.Errorf("%s: %s = %q, want %q", when, name, got, want)
		}
	}
	check("before acquiring")
	m.observe(nodeid.Event{Kind: nodeid.EventAcquired, Instance: nodeid.NodeInstance{ID: 2, Version: 5}})
	check("held", "node_id=2 5")
	m.observe(nodeid.Event{Kind: nodeid.EventRenewed, Instance: nodeid.NodeInstance{ID: 2, Version: 5}})
	check("renewed", "node_id=2 5")
	for _, end := range []nodeid.EventKind{nodeid.EventLost, nodeid.EventReleased, nodeid.EventHandedOff} {
		m.observe(nodeid.Event{Kind: nodeid.EventAcquired, Instance: nodeid.NodeInstance{ID: 1, Version: 7}})
		check("held again", "node_id=1 7")
		m.observe(nodeid.Event{Kind: end, Instance: nodeid.NodeInstance{ID: 1, Version: 7}})
		check(end.String())
	}
}

// nodeid_self_fence_remaining_seconds is read at scrape time, exists only
// while a lease is held and never goes below zero.
func TestSelfFenceRemainingSecondsIsReadAtScrape(t *testing.T) {
	m := newMetrics()
	left, held := 12*time.Second, true
	registerFenceLeft(m.reg, func() (time.Duration, bool) { return left, held })
	const name = "nodeid_self_fence_remaining_seconds"
	for _, c := range []struct {
		left time.Duration
		held bool
		want string
	}{
		{12 * time.Second, true, " 12"},
		{1500 * time.Millisecond, true, " 1.5"},
		{-time.Second, true, " 0"}, // past the deadline, before the watchdog ran
		{5 * time.Second, false, ""},
	} {
		left, held = c.left, c.held
		if got := strings.Join(series(t, m.reg, name), ";"); got != c.want {
			t.Errorf("left %v held %v: %s = %q, want %q", c.left, c.held, name, got, c.want)
		}
	}
}
