package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeid/nodeid/nodeid"
)

const kafkaVoters = `controller.quorum.voters={{range $i, $p := .Peers}}{{if $i}},{{end}}{{$p.ID}}@{{host $p.Address}}:9093{{end}}`

func writeTemplate(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTemplatesRender(t *testing.T) {
	dir := t.TempDir()
	src := writeTemplate(t, dir, "server.properties.tmpl", "node.id={{.NodeID}}\nlog.dirs={{.DataDir}}\n# v{{.Version}} of {{.ClusterSize}}, {{.TaskID}} at {{.Address}}\n"+kafkaVoters+
		"\n{{range .Peers}}{{.ID}} {{host .Address}} {{port .Address}}|{{end}}\n")
	dst := filepath.Join(dir, "server.properties")
	specs, err := parseTemplates(src + ":" + dst)
	if err == nil {
		err = holdTemplateOutputs(specs)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := checkTemplates(specs, 3); err != nil {
		t.Fatal(err)
	}
	peers := []nodeid.Peer{
		{ID: 0, Address: "10.0.0.10:9092", Version: 3, TaskID: "a", State: nodeid.PeerHeld},
		{ID: 1, Address: "[fd00::1]:9092", Version: 1, TaskID: "b", State: nodeid.PeerHeld},
		{ID: 2, Address: "broker-2.internal", Version: 2, TaskID: "c", State: nodeid.PeerHeld},
	}
	data := templateData{NodeID: 1, Version: 1, DataDir: "/data/node-1/v1", ClusterSize: 3, TaskID: "b", Address: "[fd00::1]:9092", Peers: peers}
	if _, err := renderTemplates(specs, data, nil); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dst)
	want := "node.id=1\nlog.dirs=/data/node-1/v1\n# v1 of 3, b at [fd00::1]:9092\n" +
		"controller.quorum.voters=0@10.0.0.10:9093,1@fd00::1:9093,2@broker-2.internal:9093\n" +
		"0 10.0.0.10 9092|1 fd00::1 9092|2 broker-2.internal |\n"
	if string(got) != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", got, want)
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", fi.Mode())
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, ".server.properties.*")); len(tmps) != 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
}

func TestHostAndPort(t *testing.T) {
	for addr, want := range map[string][2]string{
		"10.0.0.1:9092": {"10.0.0.1", "9092"}, "10.0.0.1": {"10.0.0.1", ""},
		"[fd00::1]:9092": {"fd00::1", "9092"}, "fd00::1": {"fd00::1", ""},
		"b.internal:1": {"b.internal", "1"}, "": {"", ""},
	} {
		if h, p := addrHost(addr), addrPort(addr); h != want[0] || p != want[1] {
			t.Errorf("%q: host %q port %q, want %q", addr, h, p, want)
		}
	}
}

func TestBadTemplatesAreUsageErrors(t *testing.T) {
	dir := t.TempDir()
	good := writeTemplate(t, dir, "good.tmpl", "id={{.NodeID}}")
	cases := map[string]string{
		"no destination":        good,
		"empty source":          ":" + filepath.Join(dir, "x"),
		"missing source":        filepath.Join(dir, "nope.tmpl") + ":" + filepath.Join(dir, "x"),
		"unparsable":            writeTemplate(t, dir, "bad.tmpl", "{{.Peers") + ":" + filepath.Join(dir, "x"),
		"unknown function":      writeTemplate(t, dir, "fn.tmpl", "{{hostname .Address}}") + ":" + filepath.Join(dir, "x"),
		"destination dir gone":  good + ":" + filepath.Join(dir, "no", "x"),
		"destination is a dir":  good + ":" + dir,
		"one destination twice": good + ":" + filepath.Join(dir, "x") + "," + good + ":" + filepath.Join(dir, "x"),
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := parseSettings(context.Background(), "run", []string{"--template", v}, io.Discard, []string{"template"}, nil)
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--template") {
				t.Errorf("%v, want a usage error naming --template", err)
			}
		})
	}
	t.Run("repeated flag and the variable", func(t *testing.T) {
		a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		s, _, err := parseSettings(context.Background(), "run", []string{"--template", good + ":" + a, "--template", good + ":" + b}, io.Discard, []string{"template"}, nil)
		if err != nil || len(s.templates) != 2 || s.templates[1].dst != b {
			t.Fatalf("%+v %v", s, err)
		}
		t.Setenv("NODEID_TEMPLATES", good+":"+a+","+good+":"+b)
		s, _, err = parseSettings(context.Background(), "run", nil, io.Discard, []string{"template"}, nil)
		if err != nil || len(s.templates) != 2 {
			t.Fatalf("%+v %v", s, err)
		}
	})
	t.Run("dry run catches a missing field", func(t *testing.T) {
		specs, err := parseTemplates(writeTemplate(t, dir, "field.tmpl", "{{.NodeId}}") + ":" + filepath.Join(dir, "x"))
		if err == nil {
			err = holdTemplateOutputs(specs)
		}
		if err != nil {
			t.Fatal(err)
		}
		var ue *usageError
		if err := checkTemplates(specs, 3); !errors.As(err, &ue) || !strings.Contains(err.Error(), "NodeId") {
			t.Errorf("checkTemplates: %v", err)
		}
	})
	t.Run("an execution error writes no destination", func(t *testing.T) {
		ok, bad := filepath.Join(dir, "ok.out"), filepath.Join(dir, "bad.out")
		// Fails only when a peer has no address, which the dry run never has.
		strict := writeTemplate(t, dir, "strict.tmpl", `{{range .Peers}}{{if not .Address}}{{template "unknown-address"}}{{end}}{{end}}`)
		specs, err := parseTemplates(good + ":" + ok + "," + strict + ":" + bad)
		if err == nil {
			err = holdTemplateOutputs(specs)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := checkTemplates(specs, 3); err != nil {
			t.Fatal(err)
		}
		data := sampleTemplateData(3)
		data.Peers[2].Address = ""
		var ue *usageError
		if _, err := renderTemplates(specs, data, nil); !errors.As(err, &ue) {
			t.Fatalf("renderTemplates: %v, want a usage error", err)
		}
		for _, p := range []string{ok, bad} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("%s written although a template failed", p)
			}
		}
	})
}

func TestNodePeersAndTheMetric(t *testing.T) {
	peers := []nodeid.Peer{
		{ID: 0, Address: "10.0.0.1:9092", State: nodeid.PeerHeld},
		{ID: 1, State: nodeid.PeerExpired},
		{ID: 2, Address: "10.0.0.3", State: nodeid.PeerHeld},
		{ID: 3, State: nodeid.PeerMissing},
		{ID: 4, State: nodeid.PeerUnusable},
	}
	if got := nodePeersEnv(peers); got != "0=10.0.0.1:9092,2=10.0.0.3" {
		t.Errorf("NODE_PEERS=%s", got)
	}
	m := newMetrics()
	m.setPeers(peers)
	if got := gaugeValue(t, m, "nodeid_peers_without_address"); got != 2 {
		t.Errorf("nodeid_peers_without_address = %v, want 2 (expired and missing; not the scaled-down ID)", got)
	}
	if got := string(peersJSON(nil)); got != "[]\n" {
		t.Errorf("empty table as JSON: %q", got)
	}
}

func gaugeValue(t *testing.T, m *metrics, name string) float64 {
	t.Helper()
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s", name)
	return 0
}

// holdTemplateOutputs opens the destinations' directories, as run does at
// its start (openOutputs), with no data root.
func holdTemplateOutputs(specs []*templateSpec) error {
	for _, t := range specs {
		h, err := openHeldFile("template destination", t.dst, "")
		if err != nil {
			return err
		}
		t.out = h
	}
	return nil
}
