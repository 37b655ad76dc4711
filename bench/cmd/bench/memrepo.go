package main

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// memBucket is an in-memory S3 bucket with S3's conditional writes, ETags
// (the MD5 of the body), Last-Modified and Date in whole seconds and
// listings of 1,000 keys a page, for the scale scenario at N = 1,000: on
// this machine a thousand providers over HTTP and gofakes3 starve each
// other's renewals. Requests are counted as S3 would bill them (a LIST per
// page). It implements nodeid.TenureRepository and
// nodeid.ReleaseHintRepository like S3Repository.
type memBucket struct {
	mu      sync.Mutex
	objects map[string]memObject
	counts  map[string]int
}

type memObject struct {
	body []byte
	meta map[string]string
	etag string
	lm   time.Time
}

var (
	_ nodeid.TenureRepository      = (*memBucket)(nil)
	_ nodeid.ReleaseHintRepository = (*memBucket)(nil)
)

func newMemBucket() *memBucket {
	return &memBucket{objects: map[string]memObject{}, counts: map[string]int{}}
}

func (b *memBucket) snapshot() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.counts)
}

func memErr(op, key string, kind error, status int) error {
	return &nodeid.StorageError{Op: op, Key: key, Status: status, Kind: kind}
}

func (b *memBucket) now() time.Time { return time.Now().UTC().Truncate(time.Second) }

// put stores body under key if ifMatch matches (or, create, if absent).
func (b *memBucket) put(op, key string, body []byte, meta map[string]string, ifMatch string, create bool) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts["PUT"]++
	o, exists := b.objects[key]
	switch {
	case create && exists:
		return "", memErr(op, key, nodeid.ErrPreconditionFailed, 412)
	case !create && !exists:
		return "", memErr(op, key, nodeid.ErrNotFound, 404)
	case !create && o.etag != ifMatch:
		return "", memErr(op, key, nodeid.ErrPreconditionFailed, 412)
	}
	etag := fmt.Sprintf(`"%x"`, md5.Sum(body))
	b.objects[key] = memObject{body: body, meta: meta, etag: etag, lm: b.now()}
	return etag, nil
}

func (b *memBucket) List(context.Context) (nodeid.Listing, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	keys := make([]string, 0, len(b.objects))
	for k := range b.objects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.counts["LIST"] += max(1, (len(keys)+999)/1000)
	l := nodeid.Listing{ServerDate: b.now(), TenuresListed: true}
	for _, k := range keys {
		o := b.objects[k]
		if k == nodeid.MarkerKey("") {
			l.MarkerSeen = true
			continue
		}
		if t, ok := nodeid.ParseTenureKey("", k); ok {
			t.LastModified = o.lm
			l.Tenures = append(l.Tenures, t)
			continue
		}
		if id, ok := nodeid.ParseLeaseKey("", k); ok {
			l.Slots = append(l.Slots, nodeid.Slot{ID: id, ETag: o.etag, LastModified: o.lm, Size: int64(len(o.body))})
		}
	}
	sort.Slice(l.Slots, func(i, j int) bool { return l.Slots[i].ID < l.Slots[j].ID })
	return l, nil
}

func (b *memBucket) Get(_ context.Context, id int) (nodeid.Record, error) {
	key := nodeid.LeaseKey("", id)
	b.mu.Lock()
	b.counts["GET"]++
	o, ok := b.objects[key]
	b.mu.Unlock()
	if !ok {
		return nodeid.Record{}, memErr("get", key, nodeid.ErrNotFound, 404)
	}
	rec := nodeid.Record{Slot: nodeid.Slot{ID: id, ETag: o.etag, LastModified: o.lm, Size: int64(len(o.body))}, ServerDate: b.now()}
	var err error
	rec.Lease, err = nodeid.DecodeLease(id, o.body, o.meta)
	return rec, err
}

func (b *memBucket) Create(_ context.Context, l nodeid.Lease) (string, error) {
	body, meta := l.Encode()
	return b.put("create", nodeid.LeaseKey("", l.Instance.ID), body, meta, "", true)
}

func (b *memBucket) Write(_ context.Context, l nodeid.Lease, etag string) (string, error) {
	body, meta := l.Encode()
	return b.put("write", nodeid.LeaseKey("", l.Instance.ID), body, meta, etag, false)
}

func (b *memBucket) Marker(context.Context) (nodeid.ClusterMarker, error) {
	key := nodeid.MarkerKey("")
	b.mu.Lock()
	b.counts["GET"]++
	o, ok := b.objects[key]
	b.mu.Unlock()
	if !ok {
		return nodeid.ClusterMarker{}, memErr("get", key, nodeid.ErrNotFound, 404)
	}
	m, err := nodeid.DecodeMarker(o.body)
	m.LastModified = o.lm
	return m, err
}

func (b *memBucket) CreateMarker(_ context.Context, m nodeid.ClusterMarker) error {
	_, err := b.put("create", nodeid.MarkerKey(""), m.Encode(), nil, "", true)
	return err
}

func (b *memBucket) ListTenures(ctx context.Context) ([]nodeid.TenureObject, error) {
	l, err := b.List(ctx)
	return l.Tenures, err
}

func (b *memBucket) CreateTenure(_ context.Context, t nodeid.TenureObject) error {
	key, ok := nodeid.TenureKey("", t)
	if !ok {
		return errors.New("tenure cannot be named")
	}
	_, err := b.put("create tenure", key, []byte(key), nil, "", true)
	return err
}

func (b *memBucket) DeleteTenure(_ context.Context, t nodeid.TenureObject) error {
	key, _ := nodeid.TenureKey("", t)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts["DELETE"]++
	if strings.HasPrefix(key, nodeid.TenureKeyPrefix) {
		delete(b.objects, key)
	}
	return nil
}

func (b *memBucket) ReleaseHint(context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts["HEAD"]++
	o, ok := b.objects[nodeid.ReleaseHintKey]
	if !ok {
		return "", memErr("head", nodeid.ReleaseHintKey, nodeid.ErrNotFound, 404)
	}
	return o.etag, nil
}

func (b *memBucket) SignalRelease(ctx context.Context) error {
	etag, err := b.ReleaseHint(ctx)
	if err != nil && !errors.Is(err, nodeid.ErrNotFound) {
		return err
	}
	_, err = b.put("release hint", nodeid.ReleaseHintKey, []byte(time.Now().String()), nil, etag, etag == "")
	if err != nil && !errors.Is(err, nodeid.ErrPreconditionFailed) && !errors.Is(err, nodeid.ErrNotFound) {
		return err
	}
	return nil
}
