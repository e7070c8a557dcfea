// Command llmgateway is an LLM gateway that limits each user to 100,000
// tokens per minute, counting the tokens a completion really used, which
// are known only once it is done:
//
//	POST /v1/completions  {"prompt": "...", "max_tokens": 500}, by the X-User
//	                      header; a fake model answers with a random number
//	                      of completion tokens, up to max_tokens
//
// Each request reserves its most: the prompt's tokens plus max_tokens
// (fleetlimit.Limiter.Reserve, through httplimit.WithCost). Once the model
// has answered, the reservation is settled at the usage the handler
// reports in the X-Usage-Total-Tokens header (httplimit.WithSettledCost):
// the tokens not used are given back. A request that would take the user
// past the limit on its reservation is refused before the model runs
// (429, with Retry-After). See docs/costs.md for when to reserve high or
// low.
//
//	go run ./examples/llmgateway                      # an embedded Redis (miniredis)
//	go run ./examples/llmgateway -redis 127.0.0.1:6379 # a real Redis
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fleetlimit/fleetlimit"
	"github.com/fleetlimit/fleetlimit/algorithm"
	"github.com/fleetlimit/fleetlimit/httplimit"
	"github.com/fleetlimit/fleetlimit/store"
)

// TokensPerMinute is each user's budget.
const TokensPerMinute = 100_000

// HeaderUsage is the response header in which the handler reports the
// tokens a completion used, for the settle.
const HeaderUsage = "X-Usage-Total-Tokens"

// maxBody bounds a request body.
const maxBody = 1 << 20

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	redisAddr := flag.String("redis", "", "address of a real Redis (default: an embedded miniredis)")
	flag.Parse()
	if err := run(*addr, *redisAddr); err != nil {
		log.Fatal(err)
	}
}

func run(addr, redisAddr string) error {
	if redisAddr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		redisAddr = mr.Addr()
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	st, err := store.NewRedis(rdb)
	if err != nil {
		return err
	}
	defer st.Close()
	h, err := newGateway(st, newFakeModel(rand.Uint64()))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("Listening on http://%s. Try:\n\n  curl -si -H 'X-User: alice' -d '{\"prompt\": \"Hello\", \"max_tokens\": 500}' http://%s/v1/completions\n", ln.Addr(), ln.Addr())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	return srv.Serve(ln)
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	Prompt    string `json:"prompt"`
	MaxTokens int64  `json:"max_tokens"`
}

// usage is the token count of a completion, as the answer reports it.
type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// promptTokens estimates a prompt's tokens: one per four bytes, at least 1.
func promptTokens(prompt string) int64 { return max(1, int64(len(prompt)+3)/4) }

// newGateway returns the gateway's handler over st, answering with model:
// a token bucket of TokensPerMinute per user that refills continuously.
func newGateway(st store.Store, model *fakeModel, opts ...fleetlimit.Option) (http.Handler, error) {
	lim, err := fleetlimit.New(algorithm.TokenBucket(TokensPerMinute, time.Minute, TokensPerMinute), st,
		append([]fleetlimit.Option{fleetlimit.WithName("llm-tokens")}, opts...)...)
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.NewMiddleware(lim, httplimit.KeyByHeader("X-User"),
		httplimit.WithCost(reservedTokens), httplimit.WithSettledCost(usedTokens))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/completions", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := readRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u := usage{PromptTokens: promptTokens(req.Prompt), CompletionTokens: model.complete(req.MaxTokens)}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
		w.Header().Set(HeaderUsage, strconv.FormatInt(u.TotalTokens, 10))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Usage usage `json:"usage"`
		}{u})
	})))
	return mux, nil
}

// reservedTokens is a request's reservation: its prompt's tokens and its
// max_tokens, the most it can use. It reads the body and puts it back for
// the handler.
func reservedTokens(r *http.Request) (int64, error) {
	req, err := readRequest(r)
	if err != nil {
		return 0, err
	}
	return promptTokens(req.Prompt) + req.MaxTokens, nil
}

// usedTokens is what the request used, as its handler reported it; a
// request the handler refused used nothing.
func usedTokens(_ *http.Request, status int, header http.Header, _ int64) int64 {
	if status != http.StatusOK {
		return 0
	}
	n, err := strconv.ParseInt(header.Get(HeaderUsage), 10, 64)
	if err != nil {
		return -1 // unknown: the reservation stands
	}
	return n
}

// readRequest reads r's completion request, and leaves r's body to be read
// again.
func readRequest(r *http.Request) (completionRequest, error) {
	var req completionRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return req, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err := json.Unmarshal(body, &req); err != nil {
		return req, fmt.Errorf("llmgateway: bad request body: %w", err)
	}
	if req.MaxTokens < 1 || req.MaxTokens > TokensPerMinute {
		return req, errors.New("llmgateway: max_tokens must be between 1 and 100000")
	}
	return req, nil
}

// fakeModel stands in for a model: each completion uses a random number of
// tokens, 1 to max_tokens. It is safe for concurrent use.
type fakeModel struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func newFakeModel(seed uint64) *fakeModel {
	return &fakeModel{rng: rand.New(rand.NewPCG(seed, seed))}
}

func (m *fakeModel) complete(maxTokens int64) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return 1 + m.rng.Int64N(maxTokens)
}
