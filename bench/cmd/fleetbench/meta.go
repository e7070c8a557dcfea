package main

import (
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// meta is what RESULTS.md says about the machine and the software.
type meta struct {
	command   string
	goVersion string
	cpu       string
	cores     int
	kernel    string
	clock     string // the kernel's clock source, which sets what time.Now costs
	memTotal  string
	loadStart string
	loadEnd   string
	commit    string
	modules   []modVersion
	nowCost   float64 // CPU ns per time.Now call on this machine
}

type modVersion struct{ Path, Version string }

// measuredModules are the libraries whose versions RESULTS.md names.
var measuredModules = []string{
	"github.com/fleetlimit/fleetlimit",
	"github.com/redis/go-redis/v9",
	"github.com/go-redis/redis_rate/v10",
	"github.com/ulule/limiter/v3",
	"github.com/throttled/throttled/v2",
	"github.com/sethvargo/go-limiter",
	"golang.org/x/time",
}

func collectMeta() meta {
	m := meta{
		command:   os.Getenv("FLEETBENCH_COMMAND"),
		goVersion: runtime.Version(),
		cpu:       cpuModel(),
		cores:     runtime.NumCPU(),
		kernel:    strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		clock:     strings.TrimSpace(readFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")),
		memTotal:  procField("/proc/meminfo", "MemTotal"),
		loadStart: loadAvg(),
		commit:    gitCommit(),
		nowCost:   timeNowCost(),
	}
	if m.command == "" {
		m.command = "go run ./cmd/fleetbench " + strings.Join(os.Args[1:], " ")
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, p := range measuredModules {
			for _, d := range bi.Deps {
				if d.Path != p {
					continue
				}
				v := d.Version
				if d.Replace != nil {
					v = "replaced by " + d.Replace.Path
					if d.Replace.Version != "" {
						v += " " + d.Replace.Version
					}
				}
				m.modules = append(m.modules, modVersion{p, v})
			}
		}
	}
	return m
}

func readFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return string(b)
}

func procField(path, field string) string {
	for _, line := range strings.Split(readFile(path), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == field {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func cpuModel() string { return procField("/proc/cpuinfo", "model name") }

func loadAvg() string {
	f := strings.Fields(readFile("/proc/loadavg"))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// gitCommit names the fleetlimit commit measured (the replace points at the
// repository root), marking uncommitted changes.
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", "..", ":(exclude).").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += " + uncommitted changes"
	}
	return c
}

// timeNowCost measures what one time.Now costs here in CPU time: every
// limiter that reads the clock per decision pays it, and on virtual machines
// it varies with the clock source.
func timeNowCost() float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const n = 1_000_000
	var sink int64
	t0 := threadCPU()
	for range n {
		sink += time.Now().UnixNano()
	}
	d := threadCPU() - t0
	if sink == 1 {
		return 0
	}
	return float64(d) / n
}
