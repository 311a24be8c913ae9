// Go peer: net/http + github.com/coder/websocket. GET / (Hello World),
// /json, /static/FILE from STATIC_DIR, /ws echo, /chat broadcast room.
// PORT, STATIC_DIR; GOMAXPROCS sets the threads (one process). With
// DATABASE_URL (postgres://...): the database tests of db.go (/db, /queries,
// /fortunes, /updates, /cached-queries, /r5) on DB_POOL (default 4)
// connections per GOMAXPROCS. The web application routes of web.go: /tpl/vars,
// /tpl/table, /tpl/page (html/template), /blocks?n=N, /view.
package main

import (
	"context"
	"log"
	"net/http"
	"os"
	"sync"

	"github.com/coder/websocket"
)

type room struct {
	mu      sync.Mutex
	members map[chan message]struct{}
}

type message struct {
	typ  websocket.MessageType
	data []byte
}

func (r *room) join(c chan message) {
	r.mu.Lock()
	r.members[c] = struct{}{}
	r.mu.Unlock()
}

func (r *room) leave(c chan message) {
	r.mu.Lock()
	delete(r.members, c)
	r.mu.Unlock()
}

func (r *room) publish(m message) {
	r.mu.Lock()
	for c := range r.members {
		select {
		case c <- m:
		default: // member too slow: the message is dropped for it
		}
	}
	r.mu.Unlock()
}

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8082"
	}
	staticDir := os.Getenv("STATIC_DIR")
	if staticDir == "" {
		staticDir = "."
	}
	accept := &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled}
	chat := &room{members: map[chan message]struct{}{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("Hello World"))
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"message":"Hello, World!"}`))
	})
	mux.Handle("/static/", http.StripPrefix("/static/", http.FileServer(http.Dir(staticDir))))
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, accept)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		ctx := context.Background()
		for {
			typ, data, err := c.Read(ctx)
			if err != nil {
				return
			}
			if c.Write(ctx, typ, data) != nil {
				return
			}
		}
	})
	mux.HandleFunc("/chat", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, accept)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out := make(chan message, 1024)
		chat.join(out)
		defer chat.leave(out)
		go func() {
			for {
				select {
				case m := <-out:
					if c.Write(ctx, m.typ, m.data) != nil {
						cancel()
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
		for {
			typ, data, err := c.Read(ctx)
			if err != nil {
				return
			}
			chat.publish(message{typ, data})
		}
	})
	registerDB(mux)
	registerWeb(mux)
	// net/http adds Date; Server on every answer.
	withServer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "go")
		mux.ServeHTTP(w, r)
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:"+port, withServer))
}
