-- The TechEmpower tables for the lab's MariaDB (bench/db/mariadb.sh): World with
-- 10,000 rows of random numbers 1..10000, Fortune with the 12 standard fortunes.
CREATE TABLE world (id INT PRIMARY KEY, randomnumber INT NOT NULL) ENGINE=InnoDB;
CREATE TABLE fortune (id INT PRIMARY KEY, message VARCHAR(2048) NOT NULL) ENGINE=InnoDB;
INSERT INTO world (id, randomnumber) SELECT seq, 1 + FLOOR(RAND() * 10000) FROM seq_1_to_10000;
INSERT INTO fortune (id, message) VALUES
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
