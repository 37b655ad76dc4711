// Command mutants is make mutants: it breaks one safety rule at a time, as
// listed in mutants/mutants.txt, in a scratch copy of the tree (never the
// tree itself), and checks that the package's tests notice. For each
// mutation it first runs the tests the list names as its killers (seconds);
// only if they all pass does it run the package's whole fast suite (every
// test but the simulation sweep). It prints a table and exits 1 if any
// mutation survived, did not compile, or no longer matches the code.
//
// Before the mutations, the killers run on the unmutated copy: a killer
// that fails there proves nothing.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// mutation is one entry of the list.
type mutation struct {
	name    string
	file    string // relative to the module root
	from    string // the original line, without its indentation
	to      string // what replaces it (the indentation is kept)
	pkg     string // e.g. ./nodeid
	killers []string
	line    int // of the entry in the list, for errors
}

// fastSkip is what the whole-suite fallback leaves out: the simulation
// sweep (make sim runs it).
const fastSkip = "^TestSimulationSweep$"

func main() {
	list := flag.String("list", "mutants/mutants.txt", "the mutation list")
	only := flag.String("run", "", "only the mutations whose name matches this regular expression")
	keep := flag.Bool("keep", false, "keep the scratch copy (its path is printed)")
	flag.Parse()
	if err := run(*list, *only, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(2)
	}
}

func run(listPath, only string, keep bool) error {
	muts, err := parseList(listPath)
	if err != nil {
		return err
	}
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			return fmt.Errorf("-run: %w", err)
		}
		muts = slices.DeleteFunc(muts, func(m mutation) bool { return !re.MatchString(m.name) })
	}
	if len(muts) == 0 {
		return errors.New("no mutation to run")
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fmt.Errorf("run from the module root: %w", err)
	}
	scratch, err := os.MkdirTemp("", "nodeid-mutants-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("scratch copy:", scratch)
	} else {
		defer os.RemoveAll(scratch)
	}
	if err := copyTree(root, scratch); err != nil {
		return fmt.Errorf("copying the tree: %w", err)
	}
	// Every entry must match the code before anything runs.
	for _, m := range muts {
		if _, _, err := apply(scratch, m, false); err != nil {
			return err
		}
	}
	start := time.Now()
	if err := baseline(scratch, muts); err != nil {
		return err
	}
	fmt.Printf("baseline: every killer passes on the unmutated tree (%v)\n\n", time.Since(start).Round(100*time.Millisecond))

	w := 0
	for _, m := range muts {
		w = max(w, len(m.name))
	}
	fmt.Printf("%-*s  %-8s  %s\n", w, "mutation", "time", "killed by")
	bad := 0
	for _, m := range muts {
		t0 := time.Now()
		verdict, ok := try(scratch, m)
		if !ok {
			bad++
		}
		fmt.Printf("%-*s  %-8s  %s\n", w, m.name, time.Since(t0).Round(100*time.Millisecond), verdict)
	}
	fmt.Printf("\nmutants: %d mutations, %d not killed, %v in all\n", len(muts), bad, time.Since(start).Round(time.Second))
	if bad > 0 {
		os.Exit(1)
	}
	return nil
}

// try applies m in the scratch copy, runs its killers, then if need be the
// package's fast suite, and restores the file. It returns the table's
// verdict and whether the mutation was killed.
func try(scratch string, m mutation) (string, bool) {
	orig, path, err := apply(scratch, m, true)
	if err != nil {
		return "ERROR: " + err.Error(), false
	}
	defer os.WriteFile(path, orig, 0o644)
	failed, out, err := goTest(scratch, m.pkg, "-run", anchored(m.killers))
	switch {
	case len(failed) > 0:
		return strings.Join(failed, ", "), true
	case err != nil:
		return "BROKEN (does not build or test?): " + firstLines(out, 3), false
	}
	failed, out, err = goTest(scratch, m.pkg, "-skip", fastSkip, "-timeout", "30m")
	switch {
	case len(failed) > 0:
		return strings.Join(failed, ", ") + " (not a named killer)", true
	case err != nil:
		return "BROKEN: " + firstLines(out, 3), false
	}
	return "SURVIVED (named killers and the fast suite pass)", false
}

// baseline runs each package's killers on the unmutated copy.
func baseline(scratch string, muts []mutation) error {
	byPkg := map[string][]string{}
	var pkgs []string
	for _, m := range muts {
		if _, ok := byPkg[m.pkg]; !ok {
			pkgs = append(pkgs, m.pkg)
		}
		byPkg[m.pkg] = append(byPkg[m.pkg], m.killers...)
	}
	for _, pkg := range pkgs {
		failed, out, err := goTest(scratch, pkg, "-run", anchored(byPkg[pkg]))
		if err != nil {
			return fmt.Errorf("the killers fail on the unmutated tree (%s): %v\n%s", pkg, failed, out)
		}
	}
	return nil
}

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// goTest runs go test -count=1 -failfast in dir and returns the tests that
// failed (top level and subtests), the output and the exit error.
func goTest(dir, pkg string, args ...string) ([]string, []byte, error) {
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.Command(goCmd, append([]string{"test", pkg, "-count=1", "-failfast"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var failed []string
	for _, s := range failLine.FindAllSubmatch(out, -1) {
		name := string(s[1])
		// A failing subtest also fails its parent: name the subtest.
		failed = slices.DeleteFunc(failed, func(f string) bool { return strings.HasPrefix(name, f+"/") })
		if !slices.ContainsFunc(failed, func(f string) bool { return strings.HasPrefix(f, name+"/") }) {
			failed = append(failed, name)
		}
	}
	return failed, out, err
}

func anchored(names []string) string {
	return "^(" + strings.Join(names, "|") + ")$"
}

// apply checks that m.from is exactly one line of m.file in the scratch
// copy and, with write, replaces it. It returns the original content.
func apply(scratch string, m mutation, write bool) ([]byte, string, error) {
	path := filepath.Join(scratch, filepath.FromSlash(m.file))
	orig, err := os.ReadFile(path)
	if err != nil {
		return nil, path, fmt.Errorf("list line %d (%s): %w", m.line, m.name, err)
	}
	lines := strings.SplitAfter(string(orig), "\n")
	at := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == m.from {
			if at >= 0 {
				return nil, path, fmt.Errorf("list line %d (%s): %q occurs more than once in %s", m.line, m.name, m.from, m.file)
			}
			at = i
		}
	}
	if at < 0 {
		return nil, path, fmt.Errorf("list line %d (%s): %q is not a line of %s (the code changed: update the list)", m.line, m.name, m.from, m.file)
	}
	if !write {
		return orig, path, nil
	}
	l := lines[at]
	indent := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
	lines[at] = indent + m.to + "\n"
	return orig, path, os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644)
}

// parseList reads entries of "key: value" lines separated by blank lines;
// # starts a comment line. Keys: name, file, from, to, pkg, kill (test
// names separated by spaces).
func parseList(path string) ([]mutation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var muts []mutation
	var cur *mutation
	finish := func() error {
		if cur == nil {
			return nil
		}
		m := *cur
		cur = nil
		if m.name == "" || m.file == "" || m.from == "" || m.pkg == "" || len(m.killers) == 0 {
			return fmt.Errorf("%s:%d: an entry needs name, file, from, to, pkg and kill", path, m.line)
		}
		if m.from == m.to {
			return fmt.Errorf("%s:%d (%s): to is the same as from", path, m.line, m.name)
		}
		muts = append(muts, m)
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			if err := finish(); err != nil {
				return nil, err
			}
			continue
		case strings.HasPrefix(line, "#"):
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want key: value, got %q", path, n, line)
		}
		if cur == nil {
			cur = &mutation{line: n}
		}
		val = strings.TrimSpace(val)
		switch strings.TrimSpace(key) {
		case "name":
			cur.name = val
		case "file":
			cur.file = val
		case "from":
			cur.from = val
		case "to":
			cur.to = val
		case "pkg":
			cur.pkg = val
		case "kill":
			cur.killers = strings.Fields(val)
		default:
			return nil, fmt.Errorf("%s:%d: unknown key %q", path, n, key)
		}
	}
	if err := finish(); err != nil {
		return nil, err
	}
	return muts, sc.Err()
}

// copyTree copies the module's files (the working tree as it is, edits
// included) but not .git, bin or dist.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() && (rel == ".git" || rel == "bin" || rel == "dist") {
			return filepath.SkipDir
		}
		if rel == ".git" { // a worktree's .git file
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(target, b, info.Mode().Perm())
		}
		return nil // sockets, FIFOs: not source
	})
}

func firstLines(b []byte, n int) string {
	lines := strings.SplitN(strings.TrimSpace(string(b)), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], " | ")
}
