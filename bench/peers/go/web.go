// The web application routes of the Go peer (reports R2 and R4), doing the demo's jobs with
// the demo's data: /tpl/vars, /tpl/table, /tpl/page rendered by html/template (parsed once at
// start, output escaped by context), /blocks?n=1..45 (cached JSON blocks merged as text),
// /view (an HTML string).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
)

var webTemplates = template.Must(template.New("vars").Parse(`<!DOCTYPE html>
<html><head><title>{{.Title}}</title></head>
<body><h1>{{.Title}}</h1><p>Hello, {{.Name}}. You have {{.Count}} new messages.</p></body></html>
{{define "table"}}<!DOCTYPE html>
<html><head><title>{{.Title}}</title></head>
<body><table>
<tr><th>id</th><th>name</th><th>value</th></tr>
{{range .Rows}}<tr><td>{{.ID}}</td><td>{{.Name}}</td><td>{{.Value}}</td></tr>
{{end}}</table></body></html>
{{end}}{{define "page"}}<!DOCTYPE html>
<html><head><title>{{.Site}}: {{.Heading}}</title></head>
<body>
<header><a href="/">{{.Site}}</a> <span class="user">{{.User}}</span></header>
<nav><ul>
{{range .Nav}}<li><a href="{{.Href}}">{{.Label}}</a></li>
{{end}}</ul></nav>
<main><h1>{{.Heading}}</h1>
{{range .Articles}}<article><h2><a href="/articles/{{.ID}}">{{.Title}}</a></h2>
<p class="meta">{{.Author}}, {{.Date}}</p>
<p>{{.Summary}} <a href="/articles/{{.ID}}">Read more</a></p></article>
{{end}}</main>
<aside class="tags">{{range .Tags}}<a href="/tags/{{.Name}}" class="w{{.Weight}}">{{.Name}}</a> {{end}}</aside>
<footer>&copy; {{.Year}} {{.Site}}</footer>
</body></html>
{{end}}`))

type webRow struct {
	ID, Value int
	Name      string
}

type webLink struct{ Href, Label string }

type webArticle struct {
	ID                           int
	Title, Author, Date, Summary string
}

type webTag struct {
	Name   string
	Weight int
}

type webPage struct {
	Site, Heading, User string
	Nav                 []webLink
	Articles            []webArticle
	Tags                []webTag
	Year                int
}

const webView = `<!DOCTYPE html><html><head><title>Brisk</title></head><body><h1>Hello from a view</h1><p>This page is a string.</p></body></html>`

func registerWeb(mux *http.ServeMux) {
	vars := struct {
		Title, Name string
		Count       int
	}{"Brisk", "Ada <admin>", 42}
	rows := make([]webRow, 1000)
	for i := range rows {
		id := i + 1
		rows[i] = webRow{ID: id, Name: fmt.Sprintf("row <%d> & co", id), Value: id * 7 % 1000}
	}
	table := struct {
		Title string
		Rows  []webRow
	}{"1,000 rows", rows}
	page := webPage{Site: "Brisk News", Heading: "Latest articles", User: "ada", Year: 2026}
	for i := 1; i <= 12; i++ {
		page.Nav = append(page.Nav, webLink{fmt.Sprintf("/section/%d", i), fmt.Sprintf("Section %d", i)})
	}
	for id := 1; id <= 10; id++ {
		page.Articles = append(page.Articles, webArticle{
			ID:      id,
			Title:   fmt.Sprintf("Article %d: \"servers\" & <sockets>", id),
			Author:  fmt.Sprintf("Author %d", id%4+1),
			Date:    fmt.Sprintf("2026-11-%02d", id+1),
			Summary: "A long-running server keeps its state in memory between requests, so the work of starting up is paid once.",
		})
	}
	for i := 1; i <= 30; i++ {
		page.Tags = append(page.Tags, webTag{fmt.Sprintf("tag%d", i), i%5 + 1})
	}
	render := func(name string, data any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var buf bytes.Buffer
			if err := webTemplates.ExecuteTemplate(&buf, name, data); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write(buf.Bytes())
		}
	}
	mux.HandleFunc("/tpl/vars", render("vars", vars))
	mux.HandleFunc("/tpl/table", render("table", table))
	mux.HandleFunc("/tpl/page", render("page", page))
	mux.HandleFunc("/view", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(webView))
	})

	type story struct {
		Title   string `json:"title"`
		Href    string `json:"href"`
		Summary string `json:"summary"`
	}
	type block struct {
		ID      int     `json:"id"`
		Title   string  `json:"title"`
		Updated string  `json:"updated"`
		Items   []story `json:"items"`
	}
	blocks := make([]string, 45)
	for i := 1; i <= 45; i++ {
		b := block{ID: i, Title: fmt.Sprintf("Block %d", i), Updated: "2026-11-23T12:00:00Z"}
		for j := 1; j <= 5; j++ {
			b.Items = append(b.Items, story{
				Title:   fmt.Sprintf("Story %d of block %d", j, i),
				Href:    fmt.Sprintf("/blocks/%d/stories/%d", i, j),
				Summary: fmt.Sprintf("A short summary of story %d, the kind a side box shows.", j),
			})
		}
		encoded, _ := json.Marshal(b)
		blocks[i-1] = string(encoded)
	}
	mux.HandleFunc("/blocks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		n := 5
		if raw, ok := r.URL.Query()["n"]; ok {
			v, err := strconv.Atoi(raw[0])
			if err != nil || v < 1 || v > 45 {
				w.WriteHeader(http.StatusBadRequest)
				w.Write([]byte(`{"error":"n: a number of blocks from 1 to 45"}`))
				return
			}
			n = v
		}
		var sb strings.Builder
		fmt.Fprintf(&sb, `{"n":%d,"blocks":[`, n)
		sb.WriteString(strings.Join(blocks[:n], ","))
		sb.WriteString("]}")
		w.Write([]byte(sb.String()))
	})
}
