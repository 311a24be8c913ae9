// The database tests of the Go peer, by the rules in
// shared/reference/techempower-rules.md: /db, /queries?queries=N, /fortunes,
// /updates?queries=N, /cached-queries?count=N and /r5, over PostgreSQL with
// pgx v5 (pgxpool). pgx prepares each statement once per connection and
// caches it (its default QueryExecModeCacheStatement); the SELECTs of one
// request are pipelined on one connection, each followed by its own Sync. The tables
// (world, fortune) are not created here.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"html/template"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Formats for the pipelined SELECT: its one parameter and both columns in binary.
var (
	binaryFormat  = []int16{1}
	binaryFormats = []int16{1, 1}
)

const (
	worldRows  = 10000
	maxQueries = 500

	selectWorld    = "SELECT id, randomnumber FROM world WHERE id = $1"
	worldStatement = "world"
	selectTop      = "SELECT id, randomnumber FROM world ORDER BY id LIMIT 5"
	selectAll      = "SELECT id, randomnumber FROM world"
	selectFortunes = "SELECT id, message FROM fortune"
	// One statement for the whole batch: the pairs arrive as two arrays.
	updateWorlds = "UPDATE world SET randomnumber = v.r FROM unnest($1::int[], $2::int[]) AS v(id, r) WHERE world.id = v.id"
)

type world struct {
	ID           int32 `json:"id"`
	RandomNumber int32 `json:"randomNumber"`
}

type fortune struct {
	ID      int32
	Message string
}

// html/template escapes every value for HTML.
var fortunesPage = template.Must(template.New("fortunes").Parse(
	`<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>` +
		`{{range .}}<tr><td>{{.ID}}</td><td>{{.Message}}</td></tr>{{end}}</table></body></html>`))

type dbTests struct {
	pool *pgxpool.Pool

	mu    sync.Mutex
	cache []world // index = id; loaded on first use of /cached-queries
}

func randomID() int32 { return 1 + rand.Int32N(worldRows) }

// count is the row count asked for in name: missing, empty, not a number or
// < 1 -> 1; > 500 -> 500.
func count(r *http.Request, name string) int {
	n, err := strconv.Atoi(r.URL.Query().Get(name))
	switch {
	case err != nil || n < 1:
		return 1
	case n > maxQueries:
		return maxQueries
	}
	return n
}

func writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

func fail(w http.ResponseWriter, status int, err error) {
	body, _ := json.Marshal(map[string]string{"error": err.Error()})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// registerDB adds the database tests to mux: over DATABASE_URL with
// DB_POOL (default 4) connections per GOMAXPROCS, or answering 503 without it.
func registerDB(mux *http.ServeMux) {
	paths := []string{"/db", "/queries", "/fortunes", "/updates", "/cached-queries", "/r5"}
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		for _, p := range paths {
			mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
				fail(w, http.StatusServiceUnavailable, fmt.Errorf("DATABASE_URL is not set"))
			})
		}
		return
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		panic(fmt.Sprintf("DATABASE_URL: %v", err))
	}
	perWorker := 4
	if s := os.Getenv("DB_POOL"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			perWorker = n
		}
	}
	cfg.MaxConns = int32(perWorker * runtime.GOMAXPROCS(0))
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects lazily
	if err != nil {
		panic(fmt.Sprintf("DATABASE_URL: %v", err))
	}
	t := &dbTests{pool: pool}
	handlers := []func(http.ResponseWriter, *http.Request) error{t.db, t.queries, t.fortunes, t.updates, t.cached, t.r5}
	for i, p := range paths {
		h := handlers[i]
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				fail(w, http.StatusInternalServerError, err)
			}
		})
	}
}

func (t *dbTests) world(ctx context.Context, id int32) (world, error) {
	w := world{ID: id}
	err := t.pool.QueryRow(ctx, selectWorld, id).Scan(&w.ID, &w.RandomNumber)
	return w, err
}

// worlds reads n random rows, one SELECT each, pipelined on one connection
// with a Sync after each (TechEmpower's rule for every query: each runs in an
// implicit transaction of its own), all flushed in one write.
func (t *dbTests) worlds(ctx context.Context, n int) ([]world, error) {
	c, err := t.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	// Prepared once per connection (pgx keeps it by name).
	if _, err := c.Conn().Prepare(ctx, worldStatement, selectWorld); err != nil {
		return nil, err
	}
	out := make([]world, n)
	p := c.Conn().PgConn().StartPipeline(ctx)
	for range out {
		id := binary.BigEndian.AppendUint32(nil, uint32(randomID()))
		p.SendQueryPrepared(worldStatement, [][]byte{id}, binaryFormat, binaryFormats)
		p.SendPipelineSync()
	}
	if err := p.Flush(); err != nil {
		return nil, err
	}
	for i := range out {
		if err := readWorld(p, &out[i]); err != nil {
			p.Close()
			return nil, err
		}
	}
	return out, p.Close()
}

// readWorld reads one pipelined SELECT's row into w, then its Sync.
func readWorld(p *pgconn.Pipeline, w *world) error {
	res, err := p.GetResults()
	if err != nil {
		return err
	}
	rows, ok := res.(*pgconn.ResultReader)
	if !ok {
		return fmt.Errorf("pipeline: a %T where rows were due", res)
	}
	found := false
	for rows.NextRow() {
		v := rows.Values()
		w.ID = int32(binary.BigEndian.Uint32(v[0]))
		w.RandomNumber = int32(binary.BigEndian.Uint32(v[1]))
		found = true
	}
	if _, err := rows.Close(); err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("no world row")
	}
	if res, err = p.GetResults(); err != nil {
		return err
	}
	if _, ok := res.(*pgconn.PipelineSync); !ok {
		return fmt.Errorf("pipeline: a %T where the Sync was due", res)
	}
	return nil
}

func (t *dbTests) db(w http.ResponseWriter, r *http.Request) error {
	row, err := t.world(r.Context(), randomID())
	if err != nil {
		return err
	}
	writeJSON(w, row)
	return nil
}

func (t *dbTests) queries(w http.ResponseWriter, r *http.Request) error {
	rows, err := t.worlds(r.Context(), count(r, "queries"))
	if err != nil {
		return err
	}
	writeJSON(w, rows)
	return nil
}

func (t *dbTests) updates(w http.ResponseWriter, r *http.Request) error {
	rows, err := t.worlds(r.Context(), count(r, "queries"))
	if err != nil {
		return err
	}
	// New numbers; a row drawn twice keeps its last number in the answer and
	// in the table, which gets each id once, ids sorted (no deadlocks between
	// concurrent batches).
	latest := make(map[int32]int32, len(rows))
	for i := range rows {
		rows[i].RandomNumber = randomID()
		latest[rows[i].ID] = rows[i].RandomNumber
	}
	ids := make([]int32, 0, len(latest))
	for id := range latest {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	numbers := make([]int32, len(ids))
	for i, id := range ids {
		numbers[i] = latest[id]
	}
	for i := range rows {
		rows[i].RandomNumber = latest[rows[i].ID]
	}
	if _, err := t.pool.Exec(r.Context(), updateWorlds, ids, numbers); err != nil {
		return err
	}
	writeJSON(w, rows)
	return nil
}

func (t *dbTests) table(ctx context.Context) ([]world, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cache != nil {
		return t.cache, nil
	}
	rows, err := t.pool.Query(ctx, selectAll)
	if err != nil {
		return nil, err
	}
	table := make([]world, worldRows+1)
	var row world
	_, err = pgx.ForEachRow(rows, []any{&row.ID, &row.RandomNumber}, func() error {
		if row.ID >= 1 && row.ID <= worldRows {
			table[row.ID] = row
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	t.cache = table
	return table, nil
}

func (t *dbTests) cached(w http.ResponseWriter, r *http.Request) error {
	table, err := t.table(r.Context())
	if err != nil {
		return err
	}
	out := make([]world, count(r, "count"))
	for i := range out {
		out[i] = table[randomID()]
	}
	writeJSON(w, out)
	return nil
}

func (t *dbTests) fortunes(w http.ResponseWriter, r *http.Request) error {
	rows, err := t.pool.Query(r.Context(), selectFortunes)
	if err != nil {
		return err
	}
	fortunes := make([]fortune, 0, 16)
	var f fortune
	if _, err := pgx.ForEachRow(rows, []any{&f.ID, &f.Message}, func() error {
		fortunes = append(fortunes, f)
		return nil
	}); err != nil {
		return err
	}
	fortunes = append(fortunes, fortune{0, "Additional fortune added at request time."})
	sort.Slice(fortunes, func(a, b int) bool { return fortunes[a].Message < fortunes[b].Message })
	var page bytes.Buffer
	if err := fortunesPage.Execute(&page, fortunes); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(page.Len()))
	w.Write(page.Bytes())
	return nil
}

func (t *dbTests) r5(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	first, err := t.world(ctx, randomID())
	if err != nil {
		return err
	}
	second, err := t.world(ctx, randomID())
	if err != nil {
		return err
	}
	rows, err := t.pool.Query(ctx, selectTop)
	if err != nil {
		return err
	}
	top := make([]world, 0, 5)
	var row world
	if _, err := pgx.ForEachRow(rows, []any{&row.ID, &row.RandomNumber}, func() error {
		top = append(top, row)
		return nil
	}); err != nil {
		return err
	}
	writeJSON(w, map[string]any{"first": first, "second": second, "top": top})
	return nil
}
