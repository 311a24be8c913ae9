<?php
// GET / -> Hello World (text/plain); GET /json -> {"message":"Hello, World!"}.
// With DATABASE_URL (postgres://user:pass@host:port/db), the database tests of
// db.php: /db, /queries, /fortunes, /updates, /cached-queries (APCu), /r5.
// The web application routes of web.php: /tpl/* (Twig), /blocks, /view.
$path = strtok($_SERVER['REQUEST_URI'] ?? '/', '?');
if ($path === '/json') {
    header('Content-Type: application/json');
    echo json_encode(['message' => 'Hello, World!']);
} elseif ($path === '/') {
    header('Content-Type: text/plain');
    echo 'Hello World';
} elseif (in_array($path, ['/db', '/queries', '/fortunes', '/updates', '/cached-queries', '/r5'], true)) {
    require __DIR__ . '/db.php';
    db_serve($path);
} elseif (in_array($path, ['/tpl/vars', '/tpl/table', '/tpl/page', '/blocks', '/view'], true)) {
    require __DIR__ . '/web.php';
    web_serve($path);
} else {
    http_response_code(404);
}
