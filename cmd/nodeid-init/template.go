package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/nodeid/nodeid/nodeid"
)

// templateSpec is one --template SRC:DST, parsed at start.
type templateSpec struct {
	src, dst string
	tmpl     *template.Template
	out      *heldFile // dst in its directory, held since the start
}

// templateData is what a template sees.
type templateData struct {
	NodeID      int
	Version     int64
	DataDir     string
	ClusterSize int
	TaskID      string
	Address     string // this task's advertised address
	Peers       []nodeid.Peer
}

// shquote is shellQuote (acquire.go): one word for sh. printf "%q" is no
// substitute: it gives double quotes, inside which sh still runs $(...).
var templateFuncs = template.FuncMap{"host": addrHost, "port": addrPort, "shquote": shellQuote}

// addrHost is the host of a host or host:port address, without brackets;
// "" for "". It never fails, so a peer whose address is unknown renders as
// an empty string rather than aborting the whole file.
func addrHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
}

// addrPort is the port of a host:port address; "" when it has none.
func addrPort(addr string) string {
	if _, p, err := net.SplitHostPort(addr); err == nil {
		return p
	}
	return ""
}

// parseTemplates parses the comma-separated SRC:DST list of --template and
// NODEID_TEMPLATE, reading and parsing every SRC now so that a bad
// template stops nodeid-init before anything is acquired or written.
func parseTemplates(v string) ([]*templateSpec, error) {
	var out []*templateSpec
	seen := map[string]bool{}
	for _, item := range splitList(v) {
		src, dst, ok := strings.Cut(item, ":")
		if !ok || src == "" || dst == "" {
			return nil, fmt.Errorf("%q: want SRC:DST", item)
		}
		dst = filepath.Clean(dst)
		if seen[dst] {
			return nil, fmt.Errorf("%s is the destination of two templates", dst)
		}
		seen[dst] = true
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("template %s: %v", src, errors.Unwrap(err))
		}
		t, err := template.New(filepath.Base(src)).Funcs(templateFuncs).Option("missingkey=error").Parse(string(b))
		if err != nil {
			return nil, fmt.Errorf("template %s: %v", src, err)
		}
		if err := checkWritableFile("template destination", dst); err != nil {
			return nil, err
		}
		out = append(out, &templateSpec{src: src, dst: dst, tmpl: t})
	}
	return out, nil
}

// sampleTemplateData stands in for the real data in the dry run at start: a
// template that names a field that does not exist, or calls a function
// wrongly, fails there instead of after the lease was taken.
func sampleTemplateData(size int) templateData {
	d := templateData{NodeID: 0, Version: 1, DataDir: "/data/node-0/v1", ClusterSize: size, TaskID: "task", Address: "192.0.2.1"}
	for id := range size {
		d.Peers = append(d.Peers, nodeid.Peer{ID: id, Address: fmt.Sprintf("192.0.2.%d", id%250+1), Version: 1, TaskID: "task", State: nodeid.PeerHeld})
	}
	return d
}

// checkTemplates executes every template on sample data, writing nothing.
func checkTemplates(specs []*templateSpec, size int) error {
	data := sampleTemplateData(size)
	for _, t := range specs {
		if err := t.tmpl.Execute(io.Discard, data); err != nil {
			return usagef("template %s: %v", t.src, err)
		}
	}
	return nil
}

// renderTemplates executes every template on the real data and replaces each
// destination atomically in its held directory, and returns what it
// rendered. All are executed
// before any is written, so an execution error leaves every destination as
// it was. A destination whose text equals its entry in prev (the last
// rendering) is not written again: a re-rendering after a peer change
// touches only the files that show peers.
func renderTemplates(specs []*templateSpec, data templateData, prev [][]byte) ([][]byte, error) {
	out := make([][]byte, len(specs))
	for i, t := range specs {
		var b bytes.Buffer
		if err := t.tmpl.Execute(&b, data); err != nil {
			return nil, usagef("template %s: %v", t.src, err)
		}
		out[i] = b.Bytes()
	}
	for i, t := range specs {
		if i < len(prev) && bytes.Equal(prev[i], out[i]) {
			continue
		}
		if err := t.out.writeFile(out[i], 0o644); err != nil {
			return nil, fmt.Errorf("template %s: write %s: %w", t.src, t.dst, err)
		}
	}
	return out, nil
}
