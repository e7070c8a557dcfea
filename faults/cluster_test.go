package faults_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/internal/redistest"
)

// startCluster starts redis-server processes of this test's own and makes
// them a Redis Cluster of three masters with the slots split evenly, as
// test.sh does with redis-cli, each master with withReplicas replicas, with
// cluster-node-timeout nodeTimeout and cluster-require-full-coverage as
// fullCoverage says. Redis's default is on: every master then refuses every
// key with CLUSTERDOWN while a slot has no master; off, a dead master leaves
// the other two serving their slots. It returns the masters and the
// replicas (those of the first master first), once every node reports
// cluster_state:ok and every replica is in sync.
func startCluster(t *testing.T, withReplicas int, nodeTimeout time.Duration, fullCoverage bool) (masters, replicas []*redistest.Server) {
	t.Helper()
	coverage := "no"
	if fullCoverage {
		coverage = "yes"
	}
	const nMasters = 3
	total := nMasters * (1 + withReplicas)
	var nodes []*redistest.Server
	var buses []int
	for range total {
		bus := freePort(t)
		nodes = append(nodes, redistest.StartServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(int(nodeTimeout/time.Millisecond)),
			"--cluster-require-full-coverage", coverage, "--cluster-port", strconv.Itoa(bus)))
		buses = append(buses, bus)
	}
	masters, replicas = nodes[:nMasters], nodes[nMasters:]
	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()
	const slots = 16384
	for i, n := range masters {
		lo, hi := i*slots/nMasters, (i+1)*slots/nMasters-1
		require.NoError(t, n.Client().Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err())
	}
	first := nodes[0].Client()
	for i, n := range nodes[1:] {
		_, port, err := net.SplitHostPort(n.Addr)
		require.NoError(t, err)
		require.NoError(t, first.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", port, buses[i+1]).Err())
	}
	for _, n := range nodes {
		waitInfo(t, ctx, n.Client(), "cluster", fmt.Sprint("cluster_known_nodes:", total))
	}
	for i, r := range replicas {
		id, err := masters[i/withReplicas].Client().Do(ctx, "CLUSTER", "MYID").Text()
		require.NoError(t, err)
		// The replica must have heard of its master before it can follow it.
		for {
			err = r.Client().Do(ctx, "CLUSTER", "REPLICATE", id).Err()
			if err == nil {
				break
			}
			require.ErrorContains(t, err, "Unknown node")
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, r := range replicas {
		waitInfo(t, ctx, r.Client(), "replication", "master_link_status:up")
	}
	for _, n := range nodes {
		waitInfo(t, ctx, n.Client(), "cluster", "cluster_state:ok", "cluster_size:3")
	}
	return masters, replicas
}

// waitInfo waits until c's INFO section (CLUSTER INFO for "cluster") holds
// every line of want.
func waitInfo(t *testing.T, ctx context.Context, c *redis.Client, section string, want ...string) {
	t.Helper()
	for {
		var info string
		var err error
		if section == "cluster" {
			info, err = c.ClusterInfo(ctx).Result()
		} else {
			info, err = c.Info(ctx, section).Result()
		}
		require.NoError(t, err)
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(info, w)
		}
		if ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// keysPerMaster returns n keys ("user:<i>") per master of the cluster that
// node belongs to, and each key's master's address. Owners come from the
// server's own slot table (CLUSTER SLOTS, CLUSTER KEYSLOT), not from a
// client's cached view, which may lag just after start-up.
func keysPerMaster(t *testing.T, node *redis.Client, n int) (keys []string, owner map[string]string) {
	t.Helper()
	slots, err := node.ClusterSlots(bg).Result()
	require.NoError(t, err)
	masters := map[string]bool{}
	for _, s := range slots {
		masters[s.Nodes[0].Addr] = true
	}
	owner = map[string]string{}
	perNode := map[string]int{}
	for i := 0; len(keys) < n*len(masters); i++ {
		k := fmt.Sprint("user:", i)
		slot, err := node.ClusterKeySlot(bg, k).Result() // the hash tag is the user key
		require.NoError(t, err)
		var a string
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				a = s.Nodes[0].Addr
			}
		}
		require.NotEmpty(t, a, "no master owns the slot of %q", k)
		if perNode[a] < n {
			perNode[a]++
			owner[k] = a
			keys = append(keys, k)
		}
	}
	return keys, owner
}
