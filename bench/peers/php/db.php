<?php
// The database tests of the PHP peer, by the rules in
// shared/reference/techempower-rules.md, over PostgreSQL with PDO pgsql: one
// persistent connection per PHP-FPM child, native (server-side) prepared
// statements. PDO deallocates a statement with its PDOStatement, so a
// statement lives for one request: prepared once per request, executed as
// often as the request needs. /cached-queries keeps the World table in APCu
// (shared by the children of one PHP-FPM), filled on first use.
// The tables (world, fortune) are not created here.

const WORLD_ROWS = 10000;
const MAX_QUERIES = 500;
const SELECT_WORLD = 'SELECT id, randomnumber FROM world WHERE id = ?';

// The row count asked for in $name: missing, empty, not a number or < 1 -> 1; > 500 -> 500.
function db_count(string $name): int
{
    $v = $_GET[$name] ?? '';
    if (!is_string($v) || !preg_match('/^[+-]?\d+$/', $v)) {
        return 1;
    }
    $n = (int) $v;
    return $n > MAX_QUERIES ? MAX_QUERIES : ($n < 1 ? 1 : $n);
}

function db_pdo(): PDO
{
    $url = getenv('DATABASE_URL');
    if (!$url) {
        throw new RuntimeException('DATABASE_URL is not set', 503);
    }
    $u = parse_url($url);
    if ($u === false || !in_array($u['scheme'] ?? '', ['postgres', 'postgresql'], true)) {
        throw new RuntimeException('DATABASE_URL is not a postgres:// URL', 503);
    }
    $dsn = sprintf('pgsql:host=%s;port=%d;dbname=%s', $u['host'] ?? '127.0.0.1', $u['port'] ?? 5432,
        ltrim(rawurldecode($u['path'] ?? ''), '/'));
    return new PDO($dsn, rawurldecode($u['user'] ?? ''), rawurldecode($u['pass'] ?? ''), [
        PDO::ATTR_PERSISTENT => true,
        PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
        PDO::ATTR_EMULATE_PREPARES => false,
        PDO::ATTR_DEFAULT_FETCH_MODE => PDO::FETCH_NUM,
    ]);
}

function db_json($value): void
{
    $body = json_encode($value);
    header('Content-Type: application/json');
    header('Content-Length: ' . strlen($body));
    echo $body;
}

// $n random rows, one SELECT each, through one prepared statement.
function db_worlds(PDO $pdo, int $n): array
{
    $stmt = $pdo->prepare(SELECT_WORLD);
    $out = [];
    for ($i = 0; $i < $n; $i++) {
        $stmt->execute([mt_rand(1, WORLD_ROWS)]);
        $row = $stmt->fetch();
        if ($row === false) {
            throw new RuntimeException('no world row');
        }
        $out[] = ['id' => (int) $row[0], 'randomNumber' => (int) $row[1]];
    }
    return $out;
}

function db_updates(PDO $pdo): array
{
    $worlds = db_worlds($pdo, db_count('queries'));
    // New numbers; a row drawn twice keeps its last number in the answer and
    // in the table, which gets each id once, ids sorted (no deadlocks between
    // concurrent batches).
    $latest = [];
    foreach ($worlds as &$w) {
        $w['randomNumber'] = mt_rand(1, WORLD_ROWS);
        $latest[$w['id']] = $w['randomNumber'];
    }
    unset($w);
    ksort($latest);
    foreach ($worlds as &$w) {
        $w['randomNumber'] = $latest[$w['id']];
    }
    unset($w);
    // One statement for the whole batch: the pairs as two arrays.
    $pdo->prepare('UPDATE world SET randomnumber = v.r FROM unnest(?::int[], ?::int[]) AS v(id, r) WHERE world.id = v.id')
        ->execute(['{' . implode(',', array_keys($latest)) . '}', '{' . implode(',', $latest) . '}']);
    return $worlds;
}

// $n random rows from the World table in APCu (keys world:ID), loaded from
// the database by the first request that finds it missing.
function db_cached(int $n): array
{
    if (!function_exists('apcu_fetch') || !apcu_enabled()) {
        throw new RuntimeException('/cached-queries needs APCu (php-apcu) enabled', 501);
    }
    $ids = [];
    for ($i = 0; $i < $n; $i++) {
        $ids[] = mt_rand(1, WORLD_ROWS);
    }
    $keys = array_map(fn ($id) => "world:$id", array_unique($ids));
    $found = apcu_fetch($keys) ?: [];
    if (count($found) < count($keys)) {
        $all = [];
        foreach (db_pdo()->query('SELECT id, randomnumber FROM world') as $row) {
            $all['world:' . $row[0]] = (int) $row[1];
        }
        apcu_store($all);
        $found = array_intersect_key($all, array_flip($keys));
    }
    $out = [];
    foreach ($ids as $id) {
        $out[] = ['id' => $id, 'randomNumber' => $found["world:$id"]];
    }
    return $out;
}

function db_fortunes(PDO $pdo): void
{
    $stmt = $pdo->prepare('SELECT id, message FROM fortune');
    $stmt->execute();
    $fortunes = $stmt->fetchAll(PDO::FETCH_KEY_PAIR);
    $fortunes[0] = 'Additional fortune added at request time.';
    asort($fortunes, SORT_STRING);
    header('Content-Type: text/html; charset=utf-8');
    // The template: PHP itself, every value through htmlspecialchars.
    ?><!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr><?php
    foreach ($fortunes as $id => $message) {
        ?><tr><td><?= (int) $id ?></td><td><?= htmlspecialchars($message, ENT_QUOTES | ENT_HTML5, 'UTF-8') ?></td></tr><?php
    }
    ?></table></body></html><?php
}

function db_r5(PDO $pdo): array
{
    $two = db_worlds($pdo, 2);
    $stmt = $pdo->prepare('SELECT id, randomnumber FROM world ORDER BY id LIMIT 5');
    $stmt->execute();
    $top = [];
    foreach ($stmt->fetchAll() as $row) {
        $top[] = ['id' => (int) $row[0], 'randomNumber' => (int) $row[1]];
    }
    return ['first' => $two[0], 'second' => $two[1], 'top' => $top];
}

function db_serve(string $path): void
{
    try {
        switch ($path) {
            case '/db':
                db_json(db_worlds(db_pdo(), 1)[0]);
                break;
            case '/queries':
                db_json(db_worlds(db_pdo(), db_count('queries')));
                break;
            case '/updates':
                db_json(db_updates(db_pdo()));
                break;
            case '/cached-queries':
                db_json(db_cached(db_count('count')));
                break;
            case '/fortunes':
                db_fortunes(db_pdo());
                break;
            case '/r5':
                db_json(db_r5(db_pdo()));
                break;
        }
    } catch (Throwable $e) {
        $code = $e->getCode();
        http_response_code(is_int($code) && $code >= 500 && $code < 600 ? $code : 500);
        db_json(['error' => $e->getMessage()]);
    }
}
