<?php
// The web application routes of the PHP peer (reports R2 and R4), doing the demo's jobs with
// the demo's data: /tpl/vars, /tpl/table, /tpl/page rendered by Twig 3 from Debian's php-twig
// (templates compiled once into a cache directory, then served by opcache; autoescape html),
// /blocks?n=1..45 (JSON blocks from APCu, filled on first use, merged as text), /view.

const WEB_VIEW = '<!DOCTYPE html><html><head><title>Brisk</title></head><body><h1>Hello from a view</h1><p>This page is a string.</p></body></html>';

function web_twig(): \Twig\Environment
{
    require_once '/usr/share/php/Twig/autoload.php';
    $loader = new \Twig\Loader\FilesystemLoader(__DIR__ . '/templates');
    $cache = sys_get_temp_dir() . '/brisk-peer-twig-' . getmypid();
    return new \Twig\Environment($loader, ['cache' => $cache, 'autoescape' => 'html', 'auto_reload' => false]);
}

function web_data(string $job): array
{
    switch ($job) {
        case 'vars':
            return ['title' => 'Brisk', 'name' => 'Ada <admin>', 'count' => 42];
        case 'table':
            $rows = [];
            for ($id = 1; $id <= 1000; $id++) {
                $rows[] = ['id' => $id, 'name' => "row <$id> & co", 'value' => $id * 7 % 1000];
            }
            return ['title' => '1,000 rows', 'rows' => $rows];
        default:
            $nav = $articles = $tags = [];
            for ($i = 1; $i <= 12; $i++) {
                $nav[] = ['href' => "/section/$i", 'label' => "Section $i"];
            }
            for ($id = 1; $id <= 10; $id++) {
                $articles[] = [
                    'id' => $id,
                    'title' => "Article $id: \"servers\" & <sockets>",
                    'author' => 'Author ' . ($id % 4 + 1),
                    'date' => sprintf('2026-11-%02d', $id + 1),
                    'summary' => 'A long-running server keeps its state in memory between requests, so the work of starting up is paid once.',
                ];
            }
            for ($i = 1; $i <= 30; $i++) {
                $tags[] = ['name' => "tag$i", 'weight' => $i % 5 + 1];
            }
            return ['site' => 'Brisk News', 'heading' => 'Latest articles', 'user' => 'ada',
                'nav' => $nav, 'articles' => $articles, 'tags' => $tags, 'year' => 2026];
    }
}

function web_blocks(): array
{
    $blocks = apcu_fetch('brisk:blocks');
    if ($blocks !== false) {
        return $blocks;
    }
    $blocks = [];
    for ($i = 1; $i <= 45; $i++) {
        $items = [];
        for ($j = 1; $j <= 5; $j++) {
            $items[] = ['title' => "Story $j of block $i", 'href' => "/blocks/$i/stories/$j",
                'summary' => "A short summary of story $j, the kind a side box shows."];
        }
        $blocks[] = json_encode(['id' => $i, 'title' => "Block $i", 'updated' => '2026-11-23T12:00:00Z', 'items' => $items],
            JSON_UNESCAPED_SLASHES);
    }
    apcu_store('brisk:blocks', $blocks);
    return $blocks;
}

function web_serve(string $path): void
{
    if ($path === '/view') {
        header('Content-Type: text/html; charset=utf-8');
        echo WEB_VIEW;
        return;
    }
    if ($path === '/blocks') {
        header('Content-Type: application/json');
        $raw = $_GET['n'] ?? '5';
        if (!is_string($raw) || !preg_match('/^\d+$/', $raw) || (int) $raw < 1 || (int) $raw > 45) {
            http_response_code(400);
            echo '{"error":"n: a number of blocks from 1 to 45"}';
            return;
        }
        $n = (int) $raw;
        echo '{"n":' . $n . ',"blocks":[' . implode(',', array_slice(web_blocks(), 0, $n)) . ']}';
        return;
    }
    $job = substr($path, 5);
    header('Content-Type: text/html; charset=utf-8');
    echo web_twig()->render("$job.html.twig", web_data($job));
}
