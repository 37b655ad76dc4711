package checker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// tenureEvents is a start event and writes every 10 ms from..to (ms) for
// one identity, each with a lease deadline 100 ms ahead.
func tenureEvents(node int, version int64, task string, graceful bool, from, to int64) []Event {
	evs := []Event{{Kind: KindStart, Node: node, Version: version, Task: task, Mono: from * ms, Graceful: graceful}}
	seq := int64(0)
	for t := from; t <= to; t += 10 {
		seq++
		evs = append(evs, Event{Kind: KindWrite, Node: node, Version: version, Task: task, Seq: seq,
			Begin: t * ms, Mono: t*ms + 1, ValidUntil: (t + 100) * ms})
	}
	return evs
}

func concat(parts ...[]Event) []Event {
	var out []Event
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func rules(vs []Violation) map[string]int {
	m := map[string]int{}
	for _, v := range vs {
		m[v.Rule]++
	}
	return m
}

// cleanHistory: node 0 handed over from a to b (crash, v1 -> v2) and node 1
// held by c throughout.
func cleanHistory() []Event {
	return concat(
		tenureEvents(0, 1, "a", false, 0, 500),
		tenureEvents(0, 2, "b", false, 2600, 3000),
		tenureEvents(1, 1, "c", false, 0, 3000),
	)
}

func TestCleanHistoryPasses(t *testing.T) {
	if vs := Check(cleanHistory(), Data{}, Options{}); len(vs) != 0 {
		t.Fatalf("violations in a clean history: %v", vs)
	}
}

func TestOverlappingWritersAreFlagged(t *testing.T) {
	evs := concat(
		tenureEvents(0, 1, "a", false, 0, 1000),
		tenureEvents(0, 2, "b", false, 900, 2000), // starts while a still writes
	)
	vs := Check(evs, Data{}, Options{})
	got := rules(vs)
	// a's writes after b's first one also carry a lower version.
	if got[RuleOverlap] != 1 || got[RuleVersionDown] != 1 || len(vs) != 2 {
		t.Fatalf("violations %v, want one %s and one %s", vs, RuleOverlap, RuleVersionDown)
	}
	if vs[0].Node != 0 || !strings.Contains(vs[0].Detail, "task a") || !strings.Contains(vs[0].Detail, "task b") {
		t.Errorf("violation does not name both writers: %v", vs[0])
	}
}

func TestVersionGoingDownIsFlagged(t *testing.T) {
	evs := concat(
		tenureEvents(0, 3, "a", false, 0, 500),
		tenureEvents(0, 2, "b", false, 1000, 1500), // a later tenure with a lower version
	)
	got := rules(Check(evs, Data{}, Options{}))
	if got[RuleVersionDown] == 0 {
		t.Fatalf("version 3 -> 2 not flagged: %v", got)
	}
	if got[RuleOverlap] != 0 {
		t.Errorf("disjoint tenures flagged as overlapping: %v", got)
	}
}

func TestSameVersionByTwoTasksIsFlagged(t *testing.T) {
	evs := concat(
		tenureEvents(0, 1, "a", false, 0, 500),
		tenureEvents(0, 1, "b", false, 1000, 1500),
	)
	if got := rules(Check(evs, Data{}, Options{})); got[RuleOneWriter] != 1 {
		t.Fatalf("v1 by two tasks not flagged: %v", got)
	}
}

// A zombie: task a holds node 0 v1, is paused, b takes over with v2, a
// resumes and writes once more with the deadline it read before the pause.
func TestResumedZombieWriteIsFlagged(t *testing.T) {
	zombie := Event{Kind: KindWrite, Node: 0, Version: 1, Task: "a", Seq: 99,
		Begin: 4000 * ms, Mono: 4000*ms + 1, ValidUntil: 600 * ms}
	evs := concat(
		tenureEvents(0, 1, "a", false, 0, 500),
		tenureEvents(0, 2, "b", false, 2600, 5000),
		[]Event{zombie},
	)
	got := rules(Check(evs, Data{}, Options{DeadlineSlack: 400 * time.Millisecond}))
	for _, r := range []string{RuleAfterDeadline, RuleOverlap, RuleVersionDown} {
		if got[r] != 1 {
			t.Errorf("zombie write: %s flagged %d times, want once (all: %v)", r, got[r], got)
		}
	}
}

func TestDeadlineSlack(t *testing.T) {
	late := Event{Kind: KindWrite, Node: 0, Version: 1, Task: "a", Seq: 1, Begin: 0, Mono: 150 * ms, ValidUntil: 100 * ms}
	start := Event{Kind: KindStart, Node: 0, Version: 1, Task: "a"}
	if got := rules(Check([]Event{start, late}, Data{}, Options{DeadlineSlack: 100 * time.Millisecond})); len(got) != 0 {
		t.Errorf("a write 50 ms late flagged with 100 ms slack: %v", got)
	}
	if got := rules(Check([]Event{start, late}, Data{}, Options{})); got[RuleAfterDeadline] != 1 {
		t.Errorf("a write 50 ms late not flagged when strict: %v", got)
	}
}

func TestWriteWithoutStartIsFlagged(t *testing.T) {
	evs := []Event{{Kind: KindWrite, Node: 0, Version: 1, Task: "a", Seq: 1, Mono: 1, ValidUntil: 10}}
	if got := rules(Check(evs, Data{}, Options{})); got[RuleUnknownVersion] != 1 {
		t.Fatalf("write without start: %v", got)
	}
}

// writeFile writes records as JSON lines to root/node-N/vK/records-vJ.log.
func writeFile(t *testing.T, root string, node int, dirVersion, fileVersion int64, recs ...Record) {
	t.Helper()
	dir := filepath.Join(root, "node-"+itoa(int64(node)), "v"+itoa(dirVersion))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, r := range recs {
		j, _ := json.Marshal(r)
		b.Write(j)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, RecordFile(fileVersion)), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// rec is a record written at ms with a lease deadline 100 ms ahead.
func rec(node int, version int64, task string, seq, at int64) Record {
	return Record{Node: node, Version: version, Task: task, Seq: seq, Begin: at * ms, ValidUntil: (at + 100) * ms}
}

func TestDataDirectories(t *testing.T) {
	a1, a2 := rec(0, 1, "a", 1, 10), rec(0, 1, "a", 2, 20)
	b1 := rec(0, 2, "b", 1, 1010)
	aStart := Event{Kind: KindStart, Node: 0, Version: 1, Task: "a", Mono: 1 * ms}
	bStart := Event{Kind: KindStart, Node: 0, Version: 2, Task: "b", Mono: 1000 * ms}
	crashStarts := []Event{aStart, bStart}
	bStart.Graceful = true
	gracefulStart := []Event{aStart, bStart}

	t.Run("clean graceful handover", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, root, 0, 1, 1, a1, a2)
		writeFile(t, root, 0, 2, 1, a1, a2)
		writeFile(t, root, 0, 2, 2, b1)
		data, err := ReadData(root)
		if err != nil {
			t.Fatal(err)
		}
		if len(data.Dirs) != 2 || len(data.Dirs[1].Records()) != 3 {
			t.Fatalf("read %+v", data)
		}
		if vs := Check(gracefulStart, data, Options{}); len(vs) != 0 {
			t.Fatalf("violations: %v", vs)
		}
	})
	t.Run("record lost in a graceful handover", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, root, 0, 1, 1, a1, a2)
		writeFile(t, root, 0, 2, 1, a1)
		data, err := ReadData(root)
		if err != nil {
			t.Fatal(err)
		}
		if got := rules(Check(gracefulStart, data, Options{})); got[RuleGracefulCopy] != 1 {
			t.Fatalf("lost record not flagged: %v", got)
		}
		// After a crash the successor copies what was there: not a loss.
		if got := rules(Check(crashStarts, data, Options{})); len(got) != 0 {
			t.Fatalf("ungraceful copy flagged: %v", got)
		}
	})
	t.Run("two tasks in one version", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, root, 0, 1, 1, a1, rec(0, 1, "z", 1, 30))
		data, err := ReadData(root)
		if err != nil {
			t.Fatal(err)
		}
		if got := rules(Check(nil, data, Options{})); got[RuleOneWriter] != 1 {
			t.Fatalf("two writers of v1 not flagged: %v", got)
		}
	})
	t.Run("foreign record", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, root, 0, 1, 1, a1, rec(1, 1, "a", 3, 30))
		writeFile(t, root, 0, 1, 2, b1) // a later version's file in v1
		data, err := ReadData(root)
		if err != nil {
			t.Fatal(err)
		}
		if got := rules(Check(nil, data, Options{})); got[RuleForeignRecord] != 2 {
			t.Fatalf("foreign records: %v", got)
		}
	})
}

func TestReadEventsToleratesOnlyATornLastLine(t *testing.T) {
	dir := t.TempDir()
	good, _ := json.Marshal(Event{Kind: KindStart, Node: 1, Version: 2, Task: "a"})
	if err := os.WriteFile(filepath.Join(dir, "a.jsonl"), append(append(good, '\n'), []byte(`{"kind":"wri`)...), 0o644); err != nil {
		t.Fatal(err)
	}
	evs, err := ReadEvents(dir)
	if err != nil || len(evs) != 1 || evs[0].Version != 2 {
		t.Fatalf("torn last line: %+v %v", evs, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b.jsonl"), append([]byte("garbage\n"), append(good, '\n')...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadEvents(dir); err == nil {
		t.Fatal("a malformed line in the middle was accepted")
	}
}
