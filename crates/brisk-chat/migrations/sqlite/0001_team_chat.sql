-- Accounts, rooms and who is in them, messages, and the mentions the mention job records.
-- Times are milliseconds since the epoch (the same on every backend).
CREATE TABLE users (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE rooms (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    owner_id INTEGER NOT NULL REFERENCES users (id),
    message_count INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);
CREATE TABLE members (
    room_id INTEGER NOT NULL REFERENCES rooms (id),
    user_id INTEGER NOT NULL REFERENCES users (id),
    PRIMARY KEY (room_id, user_id)
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    room_id INTEGER NOT NULL REFERENCES rooms (id),
    user_id INTEGER NOT NULL REFERENCES users (id),
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX messages_room_newest ON messages (room_id, id DESC);
CREATE TABLE mentions (
    message_id INTEGER NOT NULL REFERENCES messages (id),
    user_id INTEGER NOT NULL REFERENCES users (id),
    PRIMARY KEY (message_id, user_id)
);
