package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// cmdPeers prints the cluster's peers table: who holds each node ID, under
// which version, and where to reach it.
func cmdPeers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, repo, _, err := readSession(ctx, "peers", args, stdout, stderr,
		func(fs *flag.FlagSet, s *settings) {
			fs.BoolVar(&s.json, "json", false, "print a JSON array of {id, address, version, holder, state}")
		})
	if err != nil {
		return err
	}
	peers, err := nodeid.ReadPeers(ctx, repo, s.clusterSize, s.leaseDuration)
	if err != nil {
		return err
	}
	if s.json {
		_, err := stdout.Write(peersJSON(peers))
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tVERSION\tHOLDER\tSTATE")
	for _, p := range peers {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", p.ID, dash(p.Address), p.Version, dash(p.TaskID), p.State)
	}
	return tw.Flush()
}

// peersJSON is the table as `peers --json` prints it and NODE_PEERS_FILE
// holds it: an array of nodeid.Peer, never null.
func peersJSON(peers []nodeid.Peer) []byte {
	if peers == nil {
		peers = []nodeid.Peer{}
	}
	b, _ := json.MarshalIndent(peers, "", "  ")
	return append(b, '\n')
}

// nodePeersEnv is NODE_PEERS: id=address for every peer with a known
// address, in ID order.
func nodePeersEnv(peers []nodeid.Peer) string {
	var parts []string
	for _, p := range peers {
		if p.Address != "" {
			parts = append(parts, fmt.Sprintf("%d=%s", p.ID, p.Address))
		}
	}
	return strings.Join(parts, ",")
}

// defaultPeersFile sits beside the lease file and is named after it:
// lease.json -> lease-peers.json.
func defaultPeersFile(leaseFile string) string {
	return filepath.Join(filepath.Dir(leaseFile), strings.TrimSuffix(filepath.Base(leaseFile), ".json")+"-peers.json")
}

// readPeers reads the table for a child about to start. Our own entry is
// what we just wrote, so it is filled in from what we know rather than
// trusted to a read that may have failed for that one object.
func (sess *session) readPeers(ctx context.Context, inst nodeid.NodeInstance) ([]nodeid.Peer, error) {
	// One LIST and a GET per object, each bounded by T.
	ctx, cancel := context.WithTimeout(ctx, time.Duration(sess.cfg.ClusterSize+2)*sess.cfg.RequestTimeout)
	defer cancel()
	peers, err := nodeid.ReadPeers(ctx, sess.repo, sess.cfg.ClusterSize, sess.cfg.LeaseDuration)
	if err != nil {
		if lerr := sess.provider.Err(); errors.Is(lerr, nodeid.ErrLeaseLost) {
			return nil, lerr
		}
		return nil, fmt.Errorf("read the peers table: %w", err)
	}
	self := nodeid.Peer{ID: inst.ID, Address: sess.cfg.Address, Version: inst.Version, TaskID: sess.cfg.TaskID, State: nodeid.PeerHeld}
	i := slices.IndexFunc(peers, func(p nodeid.Peer) bool { return p.ID == inst.ID })
	if i >= 0 {
		peers[i] = self
	} else {
		peers = append(peers, self)
		slices.SortFunc(peers, func(a, b nodeid.Peer) int { return a.ID - b.ID })
	}
	sess.metrics.setPeers(peers)
	return peers, nil
}

// followPeers keeps the peers metric, and the peers file if path is set,
// current with the provider's table until the tenure ends or ctx does, and
// renders run's templates again (first, as before the start, so the files
// agree). last is the table already written. A write that fails is logged
// and retried with the next change: the child keeps the previous file.
func (sess *session) followPeers(ctx context.Context, path string, last []nodeid.Peer) {
	p := sess.provider
	for {
		changed := p.PeersChanged() // before Peers, so no change is missed
		peers := p.Peers()
		select {
		case <-p.Done(): // the tenure ended: the table is no longer ours to publish
			return
		default:
		}
		if len(peers) > 0 && !slices.Equal(peers, last) {
			sess.metrics.setPeers(peers)
			sess.rerender(peers)
			if path != "" {
				if err := sess.peersOut.writeFile(peersJSON(peers), 0o644); err != nil {
					sess.log.Error("cannot update the peers file", "path", path, "err", err)
				} else {
					sess.log.Info("peers file updated", "path", path, "peers", nodePeersEnv(peers))
				}
			}
			last = peers
		}
		select {
		case <-changed:
		case <-p.Done():
			return
		case <-ctx.Done():
			return
		}
	}
}

// rerender renders run's templates with the peers table peers, writing the
// destinations whose text changed: a broker that reads its configuration
// again (or a script waiting for a peer's address) sees the current table.
// An error is logged and the destinations stay as they were.
func (sess *session) rerender(peers []nodeid.Peer) {
	if sess.tmplData == nil || len(sess.s.templates) == 0 {
		return
	}
	data := *sess.tmplData
	data.Peers = peers
	out, err := renderTemplates(sess.s.templates, data, sess.tmplOut)
	if err != nil {
		sess.log.Error("cannot render the templates again", "err", err)
		return
	}
	for i, t := range sess.s.templates {
		if !bytes.Equal(out[i], sess.tmplOut[i]) {
			sess.log.Info("template rendered again", "src", t.src, "dst", t.dst)
		}
	}
	sess.tmplOut = out
}
