<?php
// GET / -> Hello World (text/plain); GET /json -> {"message":"Hello, World!"}.
$path = strtok($_SERVER['REQUEST_URI'] ?? '/', '?');
if ($path === '/json') {
    header('Content-Type: application/json');
    echo json_encode(['message' => 'Hello, World!']);
} elseif ($path === '/') {
    header('Content-Type: text/plain');
    echo 'Hello World';
} else {
    http_response_code(404);
}
