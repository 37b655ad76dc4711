// Package checker verifies the safety invariants of a chaos experiment from
// what the test brokers left behind: their event logs (one JSON-lines file
// per task, every write stamped with the host's CLOCK_BOOTTIME) and the
// versioned data directories node-N/vK.
//
// The checker trusts no process's own claim of holding a lease: it judges
// only what was written and when, so a bug anywhere in the lease protocol,
// the supervisor or the broker's fencing shows up as a violation.
package checker

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"time"
)

// Event kinds written by the test broker.
const (
	KindStart = "start" // the broker started with its identity
	KindWrite = "write" // one record appended to the data directory
	KindStop  = "stop"  // the broker stopped writing, Reason says why
)

// Event is one line of a broker's event log. Monotonic readings are
// nanoseconds of the system-wide CLOCK_BOOTTIME (clock.SystemBoottime), so
// events of different processes on one host can be ordered.
type Event struct {
	Kind    string `json:"kind"`
	Node    int    `json:"node"`
	Version int64  `json:"version"`
	Task    string `json:"task"`
	Seq     int64  `json:"seq,omitempty"`
	// Begin is the reading taken before the lease file was checked for
	// this write; Mono the reading once the write had completed (for
	// start and stop events, when they happened).
	Begin int64 `json:"begin,omitempty"`
	Mono  int64 `json:"mono"`
	// ValidUntil is the lease file's monotonic deadline that allowed the
	// write.
	ValidUntil int64  `json:"validUntil,omitempty"`
	Graceful   bool   `json:"graceful,omitempty"` // start: NODE_PREVIOUS_GRACEFUL
	PID        int    `json:"pid,omitempty"`      // start: the broker's process ID
	Reason     string `json:"reason,omitempty"`   // stop
}

// Record is one line of a data file records-vK.log in a data directory: the
// broker stamps every record with its identity and with the evidence of its
// tenure at the time of the write, because the record may be all that is
// left of a write (a broker killed between its record and its event) and,
// through a hard link, may sit in a successor's directory.
type Record struct {
	Node    int    `json:"node"`
	Version int64  `json:"version"`
	Task    string `json:"task"`
	Seq     int64  `json:"seq"`
	// Begin is the CLOCK_BOOTTIME reading taken before the lease file was
	// checked for this write; ValidUntil the lease file's deadline that
	// allowed it.
	Begin      int64 `json:"begin"`
	ValidUntil int64 `json:"validUntil"`
}

// RecordFile returns the name of the data file a broker of version v writes.
// Each version appends to its own file, as log-structured brokers write new
// segments: after a graceful handover the files of earlier versions are hard
// links shared with the predecessor's directory and must not be modified.
func RecordFile(v int64) string { return fmt.Sprintf("records-v%d.log", v) }

var (
	nodeDirRE    = regexp.MustCompile(`^node-(0|[1-9][0-9]*)$`)
	versionDirRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)$`)
	recordFileRE = regexp.MustCompile(`^records-v(0|[1-9][0-9]*)\.log$`)
)

// Dir is the content of one data directory node-N/vK.
type Dir struct {
	Node    int
	Version int64
	// Files maps the version J of each records-vJ.log to its records, in
	// file order.
	Files map[int64][]Record
}

// Records returns every record of the directory, file by file in version
// order.
func (d Dir) Records() []Record {
	var vs []int64
	for v := range d.Files {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	var out []Record
	for _, v := range vs {
		out = append(out, d.Files[v]...)
	}
	return out
}

// Data is every data directory under a data root.
type Data struct {
	Dirs []Dir // by node, then version
}

// Dir returns the directory node-N/vK, if present.
func (d Data) Dir(node int, version int64) (Dir, bool) {
	for _, x := range d.Dirs {
		if x.Node == node && x.Version == version {
			return x, true
		}
	}
	return Dir{}, false
}

// ReadEvents reads every *.jsonl event log in dir. A torn last line (the
// broker was killed mid-write) is ignored; any other malformed line is an
// error, because a checker that skips what it cannot read proves nothing.
func ReadEvents(dir string) ([]Event, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("event logs: %w", err)
	}
	var events []Event
	for _, p := range paths {
		evs, err := readJSONLines[Event](p, "event log")
		if err != nil {
			return nil, err
		}
		events = append(events, evs...)
	}
	return events, nil
}

// ReadData reads the records of every data directory under root. As with
// events, only a torn last line of a file is tolerated.
func ReadData(root string) (Data, error) {
	var data Data
	nodes, err := os.ReadDir(root)
	if err != nil {
		return data, fmt.Errorf("data root: %w", err)
	}
	for _, n := range nodes {
		m := nodeDirRE.FindStringSubmatch(n.Name())
		if m == nil || !n.IsDir() {
			continue
		}
		node, _ := strconv.Atoi(m[1])
		versions, err := os.ReadDir(filepath.Join(root, n.Name()))
		if err != nil {
			return data, fmt.Errorf("data root: %w", err)
		}
		for _, v := range versions {
			vm := versionDirRE.FindStringSubmatch(v.Name())
			if vm == nil || !v.IsDir() {
				continue
			}
			version, _ := strconv.ParseInt(vm[1], 10, 64)
			d := Dir{Node: node, Version: version, Files: map[int64][]Record{}}
			dir := filepath.Join(root, n.Name(), v.Name())
			files, err := os.ReadDir(dir)
			if err != nil {
				return data, fmt.Errorf("data directory: %w", err)
			}
			for _, f := range files {
				fm := recordFileRE.FindStringSubmatch(f.Name())
				if fm == nil || !f.Type().IsRegular() {
					continue
				}
				fv, _ := strconv.ParseInt(fm[1], 10, 64)
				recs, err := readJSONLines[Record](filepath.Join(dir, f.Name()), "data file")
				if err != nil {
					return data, err
				}
				d.Files[fv] = recs
			}
			data.Dirs = append(data.Dirs, d)
		}
	}
	sort.Slice(data.Dirs, func(i, j int) bool {
		a, b := data.Dirs[i], data.Dirs[j]
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		return a.Version < b.Version
	})
	return data, nil
}

// readJSONLines decodes each line of the file at path as a T. Only a torn
// last line is dropped; any other malformed line is an error naming what
// the file is.
func readJSONLines[T any](path, what string) ([]T, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	var out []T
	for i, line := range lines {
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			if i == len(lines)-1 {
				break
			}
			return nil, fmt.Errorf("%s %s line %d: %w", what, path, i+1, err)
		}
		out = append(out, v)
	}
	return out, nil
}

func readLines(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	var lines [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if len(sc.Bytes()) > 0 {
			lines = append(lines, slices.Clone(sc.Bytes()))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return lines, nil
}

// Rules, as they appear in Violation.Rule.
const (
	RuleOverlap        = "overlapping-writers"  // two tenures of one node ID wrote at overlapping times
	RuleVersionDown    = "version-went-down"    // a write carried a lower version than an earlier write of the node
	RuleOneWriter      = "one-writer-per-dir"   // a version (vK directory) was written by more than one task
	RuleAfterDeadline  = "write-after-deadline" // a write completed after the lease deadline it relied on
	RuleGracefulCopy   = "graceful-carryover"   // after a graceful handover a record of vK is missing in vK+1
	RuleForeignRecord  = "foreign-record"       // a data file holds a record of another node or a later version
	RuleUnknownVersion = "write-without-start"  // a write by a task that never announced that identity
	// Every data record, found in any directory (hard links included),
	// against its writer's tenure: written with a valid lease, and before
	// a later tenure of its node began.
	RuleStaleRecord    = "stale-record"
	RuleRecordNoTenure = "record-without-tenure" // a record whose writer never announced that identity, or without evidence
)

// Violation is one broken invariant.
type Violation struct {
	Rule   string
	Node   int
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s: node %d: %s", v.Rule, v.Node, v.Detail) }

// Options tune the checker.
type Options struct {
	// DeadlineSlack is how long after the lease deadline a write may
	// complete: the broker checks the lease file and then writes, and a
	// preemption between the two moves the write's end. The design's safety
	// margin m covers exactly that, so it is the natural value; zero is
	// strict.
	DeadlineSlack time.Duration
}

// tenure is one (node, version, task) as seen in the writes.
type tenure struct {
	node        int
	version     int64
	task        string
	first, last int64 // Begin of the first write, Mono of the last
	writes      int
}

// Check applies every rule to the events and the data and returns the
// violations, in a stable order. No violations means the run was safe.
func Check(events []Event, data Data, opt Options) []Violation {
	var out []Violation
	add := func(rule string, node int, format string, args ...any) {
		out = append(out, Violation{Rule: rule, Node: node, Detail: fmt.Sprintf(format, args...)})
	}

	var writes []Event
	started := map[string]bool{}
	for _, e := range events {
		switch e.Kind {
		case KindWrite:
			writes = append(writes, e)
		case KindStart:
			started[fmt.Sprintf("%d/%d/%s", e.Node, e.Version, e.Task)] = true
		}
	}
	sort.SliceStable(writes, func(i, j int) bool { return writes[i].Mono < writes[j].Mono })

	// Tenures and the per-write rules.
	tenures := map[string]*tenure{}
	var order []string
	maxVersion := map[int]Event{}
	wentDown := map[string]bool{} // reported once per tenure
	for _, w := range writes {
		key := fmt.Sprintf("%d/%d/%s", w.Node, w.Version, w.Task)
		if !started[key] {
			add(RuleUnknownVersion, w.Node, "task %s wrote seq %d as v%d without a start event", w.Task, w.Seq, w.Version)
			started[key] = true // once per identity
		}
		t := tenures[key]
		if t == nil {
			t = &tenure{node: w.Node, version: w.Version, task: w.Task, first: w.Begin, last: w.Mono}
			tenures[key] = t
			order = append(order, key)
		}
		t.first = min(t.first, w.Begin)
		t.last = max(t.last, w.Mono)
		t.writes++

		if prev, ok := maxVersion[w.Node]; ok && w.Version < prev.Version {
			if !wentDown[key] {
				wentDown[key] = true
				add(RuleVersionDown, w.Node, "task %s wrote seq %d as v%d at %s, after task %s wrote as v%d at %s",
					w.Task, w.Seq, w.Version, mono(w.Mono), prev.Task, prev.Version, mono(prev.Mono))
			}
		} else if !ok || w.Version > prev.Version {
			maxVersion[w.Node] = w
		}
		if slack := int64(opt.DeadlineSlack); w.Mono > w.ValidUntil+slack {
			add(RuleAfterDeadline, w.Node, "task %s (v%d) completed seq %d %v after its lease deadline",
				w.Task, w.Version, w.Seq, time.Duration(w.Mono-w.ValidUntil))
		}
	}

	// Tenures of one node must be disjoint in time, and one version must
	// belong to one task.
	byNode := map[int][]*tenure{}
	for _, k := range order {
		t := tenures[k]
		byNode[t.node] = append(byNode[t.node], t)
	}
	nodes := sortedKeys(byNode)
	for _, n := range nodes {
		ts := byNode[n]
		for i := range ts {
			for j := i + 1; j < len(ts); j++ {
				a, b := ts[i], ts[j]
				if a.version == b.version && a.task != b.task {
					add(RuleOneWriter, n, "v%d written by tasks %s and %s", a.version, a.task, b.task)
				}
				if a.first <= b.last && b.first <= a.last {
					add(RuleOverlap, n, "task %s (v%d, %s..%s) and task %s (v%d, %s..%s)",
						a.task, a.version, mono(a.first), mono(a.last), b.task, b.version, mono(b.first), mono(b.last))
				}
			}
		}
	}

	// The data directories.
	for _, d := range data.Dirs {
		for fv, recs := range d.Files {
			tasks := map[string]bool{}
			for _, r := range recs {
				if r.Node != d.Node || r.Version != fv || fv > d.Version {
					add(RuleForeignRecord, d.Node, "v%d/%s holds a record of node %d v%d (task %s seq %d)",
						d.Version, RecordFile(fv), r.Node, r.Version, r.Task, r.Seq)
					continue
				}
				tasks[r.Task] = true
			}
			if len(tasks) > 1 {
				add(RuleOneWriter, d.Node, "v%d/%s written by tasks %v", d.Version, RecordFile(fv), sortedKeys(tasks))
			}
		}
	}

	// Every record against its writer's tenure. Old rules compared a
	// record's node and version with its file's only: a stale writer's
	// append to its own file, hard-linked into the successor's directory,
	// matched them, and if the writer died before its event no rule saw it.
	starts := map[string]Event{}
	for _, e := range events {
		if e.Kind == KindStart {
			starts[fmt.Sprintf("%d/%d/%s", e.Node, e.Version, e.Task)] = e
		}
	}
	checked := map[string]bool{} // a record shared by hard links or copied is checked once
	for _, d := range data.Dirs {
		for _, fv := range sortedKeys(d.Files) {
			for _, r := range d.Files[fv] {
				if r.Node != d.Node || r.Version != fv || fv > d.Version {
					continue // foreign-record
				}
				k := fmt.Sprintf("%d/%d/%s/%d", r.Node, r.Version, r.Task, r.Seq)
				if checked[k] {
					continue
				}
				checked[k] = true
				where := fmt.Sprintf("v%d/%s", d.Version, RecordFile(fv))
				for _, v := range checkRecord(r, where, starts, events, opt) {
					add(v.Rule, r.Node, "%s", v.Detail)
				}
			}
		}
	}

	// After a graceful handover nothing of the predecessor may be lost.
	for _, e := range events {
		if e.Kind != KindStart || !e.Graceful {
			continue
		}
		next, ok := data.Dir(e.Node, e.Version)
		if !ok {
			continue
		}
		prev, ok := latestBefore(data, e.Node, e.Version)
		if !ok {
			continue
		}
		have := map[Record]bool{}
		for _, r := range next.Records() {
			have[r] = true
		}
		missing := 0
		var firstMissing Record
		for _, r := range prev.Records() {
			if !have[r] {
				if missing == 0 {
					firstMissing = r
				}
				missing++
			}
		}
		if missing > 0 {
			add(RuleGracefulCopy, e.Node, "%d records of v%d missing in v%d after a graceful handover, first: task %s v%d seq %d",
				missing, prev.Version, next.Version, firstMissing.Task, firstMissing.Version, firstMissing.Seq)
		}
	}

	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].Rule < out[j].Rule
	})
	return out
}

// checkRecord cross-checks one data record with its writer's tenure: the
// writer announced (node, version, task); the lease file it read allowed the
// write (Begin before ValidUntil); no later tenure of the node had started
// when the write began; and, unless that tenure started gracefully (the
// predecessor was stopped before it released), the writer's deadline ended
// before it started.
func checkRecord(r Record, where string, starts map[string]Event, events []Event, opt Options) []Violation {
	who := fmt.Sprintf("task %s's record seq %d (v%d, in %s)", r.Task, r.Seq, r.Version, where)
	if _, ok := starts[fmt.Sprintf("%d/%d/%s", r.Node, r.Version, r.Task)]; !ok {
		return []Violation{{RuleRecordNoTenure, r.Node, who + " has no start event: no tenure of its writer"}}
	}
	if r.Begin == 0 || r.ValidUntil == 0 {
		return []Violation{{RuleRecordNoTenure, r.Node, who + " carries no begin or deadline: it cannot be checked"}}
	}
	var out []Violation
	if r.Begin >= r.ValidUntil {
		out = append(out, Violation{RuleStaleRecord, r.Node, fmt.Sprintf("%s began at %s, not before its lease deadline %s",
			who, mono(r.Begin), mono(r.ValidUntil))})
	}
	for _, e := range events {
		if e.Kind != KindStart || e.Node != r.Node || e.Version <= r.Version {
			continue
		}
		switch {
		case r.Begin >= e.Mono:
			out = append(out, Violation{RuleStaleRecord, r.Node, fmt.Sprintf("%s began at %s, after task %s started v%d at %s",
				who, mono(r.Begin), e.Task, e.Version, mono(e.Mono))})
		case !e.Graceful && r.ValidUntil > e.Mono+int64(opt.DeadlineSlack):
			out = append(out, Violation{RuleStaleRecord, r.Node, fmt.Sprintf("%s relied on a deadline %s past the start of v%d at %s (not a graceful handover)",
				who, mono(r.ValidUntil), e.Version, mono(e.Mono))})
		default:
			continue
		}
		break // one later tenure is enough to name
	}
	return out
}

// latestBefore returns the newest directory of node below version v: the
// source a graceful handover hard-linked from.
func latestBefore(data Data, node int, v int64) (Dir, bool) {
	var best Dir
	found := false
	for _, d := range data.Dirs {
		if d.Node == node && d.Version < v && (!found || d.Version > best.Version) {
			best, found = d, true
		}
	}
	return best, found
}

func sortedKeys[K int | int64 | string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// mono formats a monotonic reading for humans.
func mono(ns int64) string {
	return (time.Duration(ns) * time.Nanosecond).Round(time.Millisecond).String()
}
