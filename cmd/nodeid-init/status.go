package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/nodeid"
)

// slotStatus is one row of `status`.
type slotStatus struct {
	NodeID       int       `json:"nodeId"`
	State        string    `json:"state"` // held, no-holder, unknown, expired, released, unusable, corrupt, missing
	Version      int64     `json:"version"`
	TaskID       string    `json:"taskId,omitempty"`
	Address      string    `json:"address,omitempty"`  // only while held and live, as in `peers`
	TimeLeft     string    `json:"timeLeft,omitempty"` // by the server's clock; only while held and live
	TimeLeftMs   int64     `json:"timeLeftMs,omitempty"`
	LastModified time.Time `json:"lastModified,omitzero"`
	Error        string    `json:"error,omitempty"`
	// Note says whether and when a new task can take the ID, and why not.
	Note string `json:"note,omitempty"`
}

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, repo, log, err := readSession(ctx, "status", args, stdout, stderr,
		func(fs *flag.FlagSet, s *settings) {
			fs.BoolVar(&s.json, "json", false, "print JSON")
			fs.BoolVar(&s.watch, "watch", false, "refresh every 2s until interrupted; a failed refresh is shown and retried")
			fs.BoolVar(&s.check, "check", false, "for alerting: exit 1, naming the rows, when an ID is corrupt, expired or missing, or fewer IDs than the cluster size are held")
		})
	if err != nil {
		return err
	}
	if s.watch && s.check {
		return usagef("--watch and --check exclude each other")
	}
	ctx, stop := signalContext(ctx)
	defer stop()
	clear := s.watch && !s.json && isTerminal(stdout)
	for {
		rows, size, err := readStatus(ctx, repo, s.clusterSize, s.leaseDuration)
		if s.watch && ctx.Err() != nil {
			return nil
		}
		if err != nil && !s.watch {
			return err
		}
		if s.watch && !s.json {
			if clear {
				fmt.Fprint(stdout, "\033[H\033[2J") // clear the screen, refresh in place
			}
			fmt.Fprintf(stdout, "nodeid status of s3://%s/%s at %s (Ctrl-C to stop)\n\n", s.bucket, s.prefix, time.Now().Format(time.TimeOnly))
		}
		if err != nil {
			// During an S3 incident: show it and keep going.
			fmt.Fprintf(stdout, "refresh failed: %s\n", oneLine(err))
		} else {
			if len(rows) == 0 {
				warnEmpty(log, s)
			}
			if err := printStatus(stdout, rows, s.json); err != nil {
				return err
			}
			if s.check {
				if len(rows) == 0 {
					return &codeError{code: exitError, err: fmt.Errorf("check failed: no lease objects under s3://%s/%s", s.bucket, s.prefix)}
				}
				return checkRows(stdout, rows, s.clusterSize, size)
			}
		}
		if !s.watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
}

func warnEmpty(log *slog.Logger, s *settings) {
	hint := ""
	if s.prefix != "" && !strings.HasSuffix(s.prefix, "/") {
		hint = fmt.Sprintf("; the prefix does not end with '/': did you mean %s/?", s.prefix)
	}
	log.Warn(fmt.Sprintf("no lease objects under s3://%s/%s%s", s.bucket, s.prefix, hint))
}

// checkRows is status --check: nil when every ID below the cluster size is
// held or released and at least size are held, else an exit-1 error naming
// the rows.
func checkRows(stdout io.Writer, rows []slotStatus, explicit, markerSize int) error {
	var bad []string
	held, usable := 0, 0
	for _, r := range rows {
		switch r.State {
		case "corrupt", "expired", "missing":
			bad = append(bad, fmt.Sprintf("node %d %s", r.NodeID, r.State))
		}
		if r.State != "unusable" {
			usable++
		}
		if r.State == "held" {
			held++
		}
	}
	want := explicit
	if want == 0 {
		want = max(markerSize, usable)
	}
	if held < want || want == 0 {
		bad = append(bad, fmt.Sprintf("%d of %d node IDs held", held, want))
	}
	if len(bad) == 0 {
		fmt.Fprintf(stdout, "check ok: %d of %d node IDs held\n", held, want)
		return nil
	}
	return &codeError{code: exitError, err: fmt.Errorf("check failed: %s", strings.Join(bad, "; "))}
}

// isTerminal reports whether w is a terminal (screen-clear codes only then).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// readStatus reads every lease: one List, one GET per object, and the
// cluster marker. size is the cluster size rows are judged against:
// the argument, else the marker's.
func readStatus(ctx context.Context, repo nodeid.Repository, size int, localLease time.Duration) ([]slotStatus, int, error) {
	listing, err := repo.List(ctx)
	if err != nil {
		return nil, 0, err
	}
	var marker nodeid.ClusterMarker
	if listing.MarkerSeen {
		if m, err := repo.Marker(ctx); err == nil {
			marker = m
		}
	}
	var rows []slotStatus
	present := map[int]bool{}
	for _, slot := range listing.Slots {
		present[slot.ID] = true
		row := slotStatus{NodeID: slot.ID, LastModified: slot.LastModified}
		rec, err := repo.Get(ctx, slot.ID)
		switch {
		case errors.Is(err, nodeid.ErrCorruptLease):
			row.State, row.Error = "corrupt", oneLine(err)
			row.Note = "nobody can take it: find who wrote it; release --force rewrites it"
		case errors.Is(err, nodeid.ErrNotFound):
			row.State = "missing"
		case err != nil:
			return nil, 0, err
		case rec.Lease.Held() && nodeid.ValidateTaskID(strings.TrimPrefix(rec.Lease.TaskID, "recreated-by:")) != nil:
			// Not written by nodeid-init; peers and templates see it as
			// corrupt, and it is not printed to a terminal as it is.
			row.State, row.Error, row.LastModified = "corrupt", fmt.Sprintf("task id %q outside the allowed characters", rec.Lease.TaskID), rec.LastModified
			row.Note = "not a lease nodeid-init writes: find who wrote it; peers and templates do not show it"
		default:
			l := rec.Lease
			row.Version, row.TaskID, row.LastModified = int64(l.Instance.Version), l.TaskID, rec.LastModified
			lease := nodeid.HolderDuration(rec, localLease, marker.LeaseDuration)
			// What a waiting task decides, by the provider's own rule.
			verdict := nodeid.Judge(rec, marker, localLease)
			switch {
			case !l.Acquirable:
				row.State = "unusable"
				row.Note = "scaled down: takeable only after scale --cluster-size " + fmt.Sprint(slot.ID+1) + " or more"
			case !l.Held():
				row.State = "released"
				row.Note = releasedNote(rec, verdict)
			case verdict.Free:
				row.State = "expired"
				row.Note = "takeable now: its holder stopped renewing"
			case rec.ServerDate.IsZero() || rec.LastModified.IsZero():
				// Without S3's clock the holder cannot be judged live.
				row.State = "unknown"
				row.Note = "S3 sent no Date or Last-Modified: expiry cannot be judged"
			case !rec.LiveHolder():
				row.State = "no-holder"
				row.Note = "no live holder (created by scale, recreated after a delete, fenced by a scale-down, or not renewed for its holder's lease duration): takeable when it expires"
				row.setLeft(rec, lease)
			default:
				row.State = "held"
				if nodeid.ValidateAddress(l.Address) == nil {
					row.Address = l.Address
				}
				row.setLeft(rec, lease)
			}
			if row.State != "unusable" && marker.ClusterSize > 0 && slot.ID >= marker.ClusterSize {
				row.Note = strings.TrimPrefix(row.Note+"; ", "; ") + fmt.Sprintf("only tasks with NODEID_CLUSTER_SIZE >= %d take it", slot.ID+1)
			}
		}
		rows = append(rows, row)
	}
	if size == 0 {
		size = marker.ClusterSize
	}
	for id := 0; id < size; id++ {
		if !present[id] {
			rows = append(rows, slotStatus{NodeID: id, State: "missing",
				Note: "no object: a task that acquires recreates it, takeable one lease duration later"})
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].NodeID < rows[j].NodeID })
	return rows, size, nil
}

// releasedNote says when a waiting task takes a released or never-held
// lease, as verdict (nodeid.Judge) decides: at once, or only once the
// object has been quiet for L + 1 s because it proves nothing about what
// came before it (an empty body, or a never-held object the marker does
// not name).
func releasedNote(rec nodeid.Record, verdict nodeid.Verdict) string {
	l := rec.Lease
	if verdict.Free {
		if l.Forced {
			return "takeable now (forced release: its successor copies the data)"
		}
		return "takeable now"
	}
	why := "never held, but not the object the bootstrap created"
	switch {
	case l.Legacy && l.Instance.Version > 0:
		why = "Camunda release"
	case l.Legacy:
		why = "Camunda bootstrap object"
	}
	rule := fmt.Sprintf("%s: nodeid waits L + 1 s after its last write, L = %s", why, verdict.Lease)
	left, ok := nodeid.UntilExpiredByServerClock(rec.LastModified, rec.ServerDate, verdict.Lease)
	if !ok {
		return "takeable L + 1 s after its last write (" + rule + "); S3 sent no Date or Last-Modified"
	}
	return fmt.Sprintf("takeable in %s (%s)", left.Round(100*time.Millisecond), rule)
}

// setLeft fills in how long until the lease may be taken, by S3's clock:
// it is taken once Date - Last-Modified >= L + 1 s.
func (r *slotStatus) setLeft(rec nodeid.Record, lease time.Duration) {
	left := max(rec.LastModified.Add(lease).Sub(rec.ServerDate), 0)
	r.TimeLeft, r.TimeLeftMs = left.Round(time.Second).String(), left.Milliseconds()
}

func printStatus(w io.Writer, rows []slotStatus, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if rows == nil {
			rows = []slotStatus{}
		}
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tVERSION\tHOLDER\tADDRESS\tLEFT (S3 CLOCK)\tLAST MODIFIED\tNOTE")
	for _, r := range rows {
		lm := ""
		if !r.LastModified.IsZero() {
			lm = r.LastModified.UTC().Format(time.RFC3339)
		}
		holder := r.TaskID
		if r.Error != "" {
			holder = truncateWords(r.Error, 60)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.NodeID, r.State, r.Version, dash(holder), dash(r.Address), dash(r.TimeLeft), dash(lm), dash(r.Note))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncateWords shortens s to at most n bytes at a word boundary.
func truncateWords(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := strings.LastIndexByte(s[:n], ' ')
	if cut <= 0 {
		cut = n
	}
	return strings.TrimSpace(s[:cut]) + " ..."
}
