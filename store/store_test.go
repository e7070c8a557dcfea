package store_test

import (
	"testing"

	"github.com/fleetlimit/fleetlimit/internal/redistest"
	"github.com/fleetlimit/fleetlimit/internal/stores"
	"github.com/fleetlimit/fleetlimit/store"
	"github.com/fleetlimit/fleetlimit/store/storetest"
)

func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return store.NewMemory() })
}

func TestRedisMiniredisConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		_, c := redistest.Mini(t)
		return stores.Redis(t, c)
	})
}

func TestRedisRealConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return stores.Redis(t, redistest.Real(t)) })
}
