package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// slotStatus is one row of `status`.
type slotStatus struct {
	NodeID       int       `json:"nodeId"`
	State        string    `json:"state"` // held, expired, released, unusable, corrupt, missing
	Version      int64     `json:"version"`
	TaskID       string    `json:"taskId,omitempty"`
	Address      string    `json:"address,omitempty"`  // only while held and live, as in `peers`
	TimeLeft     string    `json:"timeLeft,omitempty"` // by the server's clock
	TimeLeftMs   int64     `json:"timeLeftMs,omitempty"`
	LastModified time.Time `json:"lastModified,omitzero"`
	Error        string    `json:"error,omitempty"`
}

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, repo, err := readSession(ctx, "status", args, stderr,
		func(fs *flag.FlagSet, s *settings) {
			fs.BoolVar(&s.json, "json", false, "print JSON")
			fs.BoolVar(&s.watch, "watch", false, "refresh every 2s until interrupted")
		})
	if err != nil {
		return err
	}
	ctx, stop := signalContext(ctx)
	defer stop()
	for {
		rows, err := readStatus(ctx, repo, s.clusterSize, s.leaseDuration)
		if err != nil {
			if ctx.Err() != nil && s.watch {
				return nil
			}
			return err
		}
		if s.watch && !s.json {
			fmt.Fprint(stdout, "\033[H\033[2J") // clear the screen, refresh in place
			fmt.Fprintf(stdout, "nodeid status of s3://%s/%s at %s (Ctrl-C to stop)\n\n", s.bucket, s.prefix, time.Now().Format(time.TimeOnly))
		}
		if err := printStatus(stdout, rows, s.json); err != nil {
			return err
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

// readStatus reads every lease: one List, one GET per object.
func readStatus(ctx context.Context, repo nodeid.Repository, size int, localLease time.Duration) ([]slotStatus, error) {
	listing, err := repo.List(ctx)
	if err != nil {
		return nil, err
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
		case errors.Is(err, nodeid.ErrNotFound):
			row.State = "missing"
		case err != nil:
			return nil, err
		default:
			l := rec.Lease
			row.Version, row.TaskID, row.LastModified = int64(l.Instance.Version), l.TaskID, rec.LastModified
			lease := max(l.Duration, localLease, rec.ClaimedDuration())
			switch {
			case !l.Acquirable:
				row.State = "unusable"
			case !l.Held():
				row.State = "released"
			case nodeid.ExpiredByServerClock(rec.LastModified, rec.ServerDate, lease):
				row.State = "expired"
			default:
				row.State = "held"
				if nodeid.ValidateAddress(l.Address) == nil {
					row.Address = l.Address
				}
			}
			if l.Held() && !rec.ServerDate.IsZero() {
				left := rec.LastModified.Add(lease).Sub(rec.ServerDate)
				row.TimeLeft, row.TimeLeftMs = left.Round(time.Second).String(), left.Milliseconds()
			}
		}
		rows = append(rows, row)
	}
	for id := 0; id < size; id++ {
		if !present[id] {
			rows = append(rows, slotStatus{NodeID: id, State: "missing"})
		}
	}
	return rows, nil
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
	fmt.Fprintln(tw, "NODE\tSTATE\tVERSION\tHOLDER\tADDRESS\tLEFT (S3 CLOCK)\tLAST MODIFIED")
	for _, r := range rows {
		lm := ""
		if !r.LastModified.IsZero() {
			lm = r.LastModified.UTC().Format(time.RFC3339)
		}
		holder := r.TaskID
		if r.Error != "" {
			holder = truncate(r.Error, 60)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\n", r.NodeID, r.State, r.Version, dash(holder), dash(r.Address), dash(r.TimeLeft), dash(lm))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.TrimSpace(s[:n]) + "..."
}
