package versitygw

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func findOrSkip(t *testing.T) string {
	t.Helper()
	bin, err := Find()
	if errors.Is(err, ErrNotInstalled) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestStartLosesPortRace: another server takes the chosen port before the
// gateway binds it, as a parallel test package's listener can. That server
// answers everything, as gofakes3 does. Start must notice that the answer is
// not from its gateway and still return one of its own.
func TestStartLosesPortRace(t *testing.T) {
	bin := findOrSkip(t)

	var foreign *http.Server
	var foreignAddr string
	t.Cleanup(func() {
		if foreign != nil {
			foreign.Close()
		}
	})
	orig := pickAddr
	t.Cleanup(func() { pickAddr = orig })
	pickAddr = func() (string, error) {
		pickAddr = orig // only the first attempt loses the race
		addr, err := orig()
		if err != nil {
			return "", err
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return "", err
		}
		foreign = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/xml")
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><ListAllMyBucketsResult><Buckets></Buckets></ListAllMyBucketsResult>`))
		})}
		go func() { _ = foreign.Serve(l) }()
		foreignAddr = addr
		return addr, nil
	}

	dir := t.TempDir()
	g, err := Start(bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	if g.URL == "http://"+foreignAddr {
		t.Fatalf("Start returned the foreign server's address %s", foreignAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.CreateBucket(ctx, "ours"); err != nil {
		t.Fatalf("%v; log:\n%s", err, g.Tail(20))
	}
	if _, err := os.Stat(filepath.Join(dir, "root", "ours")); err != nil {
		t.Fatalf("bucket not in our root, so %s is not our gateway: %v; log:\n%s", g.URL, err, g.Tail(20))
	}
	select {
	case <-g.Exited():
		t.Fatalf("gateway exited; log:\n%s", g.Tail(20))
	default:
	}
}

// TestStartGivesUp: when every port is taken, Start fails and shows why.
func TestStartGivesUp(t *testing.T) {
	bin := findOrSkip(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	orig := pickAddr
	t.Cleanup(func() { pickAddr = orig })
	pickAddr = func() (string, error) { return l.Addr().String(), nil }

	g, err := Start(bin, t.TempDir())
	if err == nil {
		g.Stop()
		t.Fatal("Start succeeded on a port held by someone else")
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error does not show the gateway's complaint: %v", err)
	}
}

// TestCredentialsAreOwn: a client of one gateway that reaches another one
// is refused.
func TestCredentialsAreOwn(t *testing.T) {
	bin := findOrSkip(t)
	a, err := Start(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	b, err := Start(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wrong := *a
	wrong.URL = b.URL
	if err := wrong.CreateBucket(ctx, "intruder"); err == nil {
		t.Fatal("b accepted a's credentials")
	}
	if _, err := os.Stat(filepath.Join(b.Dir, "root", "intruder")); err == nil {
		t.Fatal("bucket created in b's root with a's credentials")
	}
}
