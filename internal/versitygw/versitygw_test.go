package versitygw

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if line := SkipSummary(); line != "" {
		fmt.Fprintln(os.Stderr, line)
	}
	os.Exit(code)
}

func findOrSkip(t *testing.T) string {
	t.Helper()
	bin, skip, err := ForTest()
	if skip != "" {
		NoteSkip(t.Name())
		t.Skip(skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestPolicy: the tests needing VersityGW skip only when opted out, never
// under CI, and install the binary when it is missing.
func TestPolicy(t *testing.T) {
	found := func() (string, error) { return "/bin/versitygw", nil }
	missing := func() (string, error) { return "", ErrNotInstalled }
	noInstall := func() error { t.Error("install called"); return nil }
	for _, tc := range []struct {
		name       string
		ci, optOut bool
		find       func() (string, error)
		install    func() error
		bin        string
		skip, err  bool
	}{
		{"found", false, false, found, noInstall, "/bin/versitygw", false, false},
		{"opted out", false, true, found, noInstall, "", true, false},
		{"opt-out ignored under CI", true, true, found, noInstall, "/bin/versitygw", false, false},
		{"missing is installed", true, true, func() func() (string, error) {
			n := 0
			return func() (string, error) {
				if n++; n == 1 {
					return missing()
				}
				return found()
			}
		}(), func() error { return nil }, "/bin/versitygw", false, false},
		{"missing and not installable fails", false, false, missing, func() error { return errors.New("offline") }, "", false, true},
		{"unusable override fails", false, false, func() (string, error) { return "", errors.New("not executable") }, noInstall, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, skip, err := policy(tc.ci, tc.optOut, tc.find, tc.install)
			if bin != tc.bin || (skip != "") != tc.skip || (err != nil) != tc.err {
				t.Fatalf("policy = %q, %q, %v; want bin %q, skip %v, error %v", bin, skip, err, tc.bin, tc.skip, tc.err)
			}
			if tc.err && !strings.Contains(err.Error(), EnvSkip) && !strings.Contains(err.Error(), "not executable") {
				t.Errorf("error does not say how to opt out: %v", err)
			}
		})
	}
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
	// The mechanism: the first gateway died of the taken port, after the
	// foreign server had already answered.
	if b, err := os.ReadFile(filepath.Join(dir, "versitygw-0.log")); err != nil || !strings.Contains(string(b), "address already in use") {
		t.Errorf("first attempt's log does not show the lost port race (%v):\n%s", err, b)
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

// TestMakefileReadsVersion: the Makefile (make versitygw, which .ci/run
// calls) takes the version from the line `const Version = "..."` with sed, so
// that it is written once; this keeps the line in the shape sed expects.
func TestMakefileReadsVersion(t *testing.T) {
	src, err := os.ReadFile("versitygw.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "\nconst Version = \""+Version+"\"\n") {
		t.Errorf("versitygw.go has no line const Version = %q: the Makefile reads the version from it", Version)
	}
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "internal/versitygw/versitygw.go)") {
		t.Error("the Makefile no longer reads VERSITYGW_VERSION from internal/versitygw/versitygw.go")
	}
}
