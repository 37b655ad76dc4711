package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// metadataServer serves body as $ECS_CONTAINER_METADATA_URI_V4/task.
func metadataServer(t *testing.T, status int, body string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v4/abc/task" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v4/abc"
}

func fixedHost(ip string) func() (net.IP, string, error) {
	return func() (net.IP, string, error) { return net.ParseIP(ip), "stub host", nil }
}

func noHost() (net.IP, string, error) { return nil, "", errors.New("no address") }

// An awsvpc task's containers share one ENI; a bridge network's address
// is not reachable from other hosts and is passed over.
const awsvpcTask = `{"TaskARN":"arn:aws:ecs:eu-west-1:1:task/c/1","Containers":[
 {"Name":"sidecar","Networks":[{"NetworkMode":"bridge","IPv4Addresses":["172.17.0.2"]}]},
 {"Name":"broker","Networks":[{"NetworkMode":"awsvpc","IPv4Addresses":["10.0.1.23"],"IPv4SubnetCIDRBlock":"10.0.1.0/24"}]}]}`

func TestAdvertiseAddressResolution(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer slow.Close()
	cases := []struct {
		name       string
		explicit   string
		metadata   string // URI; "" off ECS
		host       func() (net.IP, string, error)
		want, from string
	}{
		{"explicit wins over ECS", "broker-0.internal:9092", metadataServer(t, 200, awsvpcTask), fixedHost("192.168.1.5"), "broker-0.internal:9092", "NODEID_ADVERTISE_ADDRESS"},
		{"ECS awsvpc address", "", metadataServer(t, 200, awsvpcTask), fixedHost("192.168.1.5"), "10.0.1.23", "ECS task metadata"},
		{"ECS without awsvpc falls back to the host", "", metadataServer(t, 200, `{"Containers":[{"Networks":[{"NetworkMode":"bridge","IPv4Addresses":["172.17.0.2"]}]}]}`), fixedHost("192.168.1.5"), "192.168.1.5", "stub host"},
		{"ECS error falls back to the host", "", metadataServer(t, 500, "oops"), fixedHost("192.168.1.5"), "192.168.1.5", "stub host"},
		{"ECS garbage falls back to the host", "", metadataServer(t, 200, `{"Containers":[{"Networks":[{"NetworkMode":"awsvpc","IPv4Addresses":["not-an-ip"]}]}]}`), fixedHost("192.168.1.5"), "192.168.1.5", "stub host"},
		{"off ECS: the host", "", "", fixedHost("192.168.1.5"), "192.168.1.5", "stub host"},
		{"nothing found: no address", "", "", noHost, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &settings{advertiseAddress: tc.explicit, sources: map[string]string{"advertise-address": "NODEID_ADVERTISE_ADDRESS"}}
			got, from := resolveAddress(context.Background(), s, addressSources{metadataURI: tc.metadata, client: http.DefaultClient, hostAddress: tc.host}, quiet)
			if got != tc.want || from != tc.from {
				t.Errorf("got %q from %q, want %q from %q", got, from, tc.want, tc.from)
			}
		})
	}
	t.Run("slow metadata endpoint is bounded", func(t *testing.T) {
		start := time.Now()
		got, _ := resolveAddress(context.Background(), &settings{}, addressSources{metadataURI: slow.URL, client: http.DefaultClient, hostAddress: fixedHost("192.168.1.5")}, quiet)
		if got != "192.168.1.5" || time.Since(start) > metadataTimeout+time.Second {
			t.Errorf("got %q after %v", got, time.Since(start))
		}
	})
}

func TestHostAddressIsUsable(t *testing.T) {
	ip, how, err := hostAddress()
	if err != nil {
		t.Skipf("this host has no non-loopback IPv4 address: %v", err)
	}
	if ip.IsLoopback() || ip.IsUnspecified() || ip.To4() == nil || how == "" {
		t.Fatalf("hostAddress() = %v (%s)", ip, how)
	}
	t.Logf("%v from %s", ip, how)
}

func TestBadAdvertiseAddressIsAUsageError(t *testing.T) {
	for _, v := range []string{"10.0.0.1:0", "10.0.0.1:99999", "[::1]", "fd00::1:9092:", "bad_host!", "0.0.0.0", "host:"} {
		_, _, err := parseSettings(context.Background(), "run", []string{"--advertise-address", v}, io.Discard, []string{"advertise-address"}, nil)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("--advertise-address %q: %v, want a usage error", v, err)
		}
	}
	for _, v := range []string{"10.0.0.1", "10.0.0.1:9092", "[fd00::1]:9092", "fd00::1", "broker-0.kafka.svc"} {
		s, _, err := parseSettings(context.Background(), "run", []string{"--advertise-address", v}, io.Discard, []string{"advertise-address"}, nil)
		if err != nil || s.advertiseAddress != v || s.sources["advertise-address"] != "--advertise-address" {
			t.Errorf("--advertise-address %q: %+v %v", v, s, err)
		}
	}
}
