package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/nodeid/nodeid/datadir"
	"github.com/nodeid/nodeid/nodeid"
)

// checkDataOwner refuses, before anything is written to S3 or the data
// root, a data root that belongs to another cluster: found only at the
// preparation, it would cost a lease left to expire and a version on every
// restart. A root not claimed yet is claimed by the first preparation.
func (s *settings) checkDataOwner() error {
	if s.dataRoot == "" {
		return nil
	}
	err := s.boundedCheck("read of "+datadir.OwnerName, func() error {
		return datadir.CheckOwner(s.dataRoot, datadir.Cluster{Bucket: s.bucket, Prefix: s.prefix})
	})
	var ce *codeError
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, datadir.ErrForeignCluster):
		return fmt.Errorf("%w; no node ID was taken and the data root is unchanged. %s", err, foreignAdvice)
	case err != nil:
		return fmt.Errorf("data root %s: %w", s.dataRoot, err)
	}
	return nil
}

// foreignAdvice tells the operator what to do about a data root of another
// cluster.
const foreignAdvice = "Check --data-root, --bucket and --prefix: one data root serves one cluster; after a deliberate move to another bucket or prefix, rewrite " +
	datadir.OwnerName + " (docs/operations.md)"

// prepareDataDir prepares node-N/vK when a data root is set. It is
// cancelled if the lease is lost meanwhile.
func (sess *session) prepareDataDir(ctx context.Context, inst nodeid.NodeInstance) (string, error) {
	if sess.s.dataRoot == "" {
		return "", nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.provider.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	settle := sess.s.leaseDuration
	if settle == 0 {
		settle = nodeid.DefaultLeaseDuration
	}
	var progress atomic.Int64
	prepared := sess.boundPrepare(&progress)
	dir, res, err := datadir.Prepare(ctx, sess.s.dataRoot, inst, datadir.Options{
		PreviousGraceful: sess.provider.PreviousGracefullyShutdown(),
		// A stale holder renews nothing: a file it wrote less than a lease
		// ago may be one it is still writing, so it is copied, not linked.
		SettleTime: settle,
		Immutable:  sess.s.immutable,
		Skip:       sess.s.skip,
		Rules:      sess.s.dataRules,
		Keep:       sess.s.keepVersions,
		Workers:    sess.s.dataWorkers,
		Logger:     sess.log,
		Cluster:    datadir.Cluster{Bucket: sess.s.bucket, Prefix: sess.s.prefix},
		// Only this task may redo its own unfinished preparation of inst.
		Tenure: sess.cfg.TaskID,
		// Watched by boundPrepare: a call that hangs stops it.
		Progress: &progress,
	})
	prepared(err)
	if err != nil {
		if lerr := sess.provider.Err(); lerr != nil {
			return "", lerr
		}
		if isDataRefusal(err) {
			sess.dataRefused = err
			return "", fmt.Errorf("prepare data directory: %w; %s", err, dataAdvice(err, inst))
		}
		return "", fmt.Errorf("prepare data directory: %w", err)
	}
	// datadir logs "prepared" (component=datadir) with the counts: not
	// repeated here. Mount points it left need an operator.
	if sess.metrics != nil {
		sess.metrics.dataMountPoints.Set(float64(res.MountPoints))
	}
	return dir, nil
}

// isDataRefusal reports that Prepare refused because of what is in the data
// root. Retrying cannot help, so it exits 6, and the lease is left to expire:
// a release would tell the successor it may hard-link files whose writer is
// unknown.
func isDataRefusal(err error) bool {
	for _, r := range []error{datadir.ErrNewerVersion, datadir.ErrVersionUsed, datadir.ErrUnrecognized, datadir.ErrForeignCluster} {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}

// dataAdvice tells the operator what to do about a data refusal.
func dataAdvice(err error, inst nodeid.NodeInstance) string {
	const left = "the data root is unchanged and the lease is left to expire"
	switch {
	case errors.Is(err, datadir.ErrVersionUsed):
		return fmt.Sprintf("%s. Another task holds, or held, version %d of node %d too (its lease went backwards: its object was deleted, recreated or reset): "+
			"keep that directory; the next takeover raises the version and collects it if it was never completed", left, int64(inst.Version), inst.ID)
	case errors.Is(err, datadir.ErrNewerVersion):
		return fmt.Sprintf("%s. The lease of node %d went backwards (its object was deleted, recreated or reset): "+
			"keep that directory; every takeover raises the version by one, so node %d starts again once its version is above that directory's",
			left, inst.ID, inst.ID)
	case errors.Is(err, datadir.ErrUnrecognized):
		return left + ". Check that directory by hand, and move it out of the node directory if it holds nothing needed"
	}
	return left + ". " + foreignAdvice
}
