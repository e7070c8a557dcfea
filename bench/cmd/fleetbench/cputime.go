package main

import (
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the CPU time the calling OS thread has used. A goroutine that
// measures itself must hold its thread (runtime.LockOSThread). Unlike wall
// time it does not grow while other processes hold the core, which on a
// shared machine makes in-process figures far steadier (contention on the
// host still slows the core itself).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// processCPU is the CPU time this process has used, all threads, user and
// system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadSched reads the calling thread's time on a CPU and time waiting for
// one (runnable, but another thread or process had the core), from
// /proc/thread-self/schedstat; ok is false where the kernel does not say.
func threadSched() (run, wait time.Duration, ok bool) {
	f := strings.Fields(readFirstLine("/proc/thread-self/schedstat"))
	if len(f) < 2 {
		return 0, 0, false
	}
	r, err1 := strconv.ParseInt(f[0], 10, 64)
	w, err2 := strconv.ParseInt(f[1], 10, 64)
	return time.Duration(r), time.Duration(w), err1 == nil && err2 == nil
}
