-- The TechEmpower tables, as the tests' rules give them: World (10,000 rows, a random
-- number each) and Fortune (the 12 fortunes). Idempotent, so that a database the lab seeded
-- before the demo's first start takes it unchanged.
CREATE TABLE IF NOT EXISTS world (id INTEGER PRIMARY KEY, randomnumber INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS fortune (id INTEGER PRIMARY KEY, message TEXT NOT NULL);
WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s WHERE x < 10000)
INSERT OR IGNORE INTO world (id, randomnumber)
    SELECT x, abs(random()) % 10000 + 1 FROM s;
INSERT OR IGNORE INTO fortune (id, message) VALUES
    (1, 'fortune: No such file or directory'),
    (2, 'A computer scientist is someone who fixes things that aren''t broken.'),
    (3, 'After enough decimal places, nobody gives a damn.'),
    (4, 'A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1'),
    (5, 'A computer program does what you tell it to do, not what you want it to do.'),
    (6, 'Emacs is a nice operating system, but I prefer UNIX. — Tom Christaensen'),
    (7, 'Any program that runs right is obsolete.'),
    (8, 'A list is only as strong as its weakest link. — Donald Knuth'),
    (9, 'Feature: A bug with seniority.'),
    (10, 'Computers make very fast, very accurate mistakes.'),
    (11, '<script>alert("This should not be displayed in a browser alert box.");</script>'),
    (12, 'フレームワークのベンチマーク');
