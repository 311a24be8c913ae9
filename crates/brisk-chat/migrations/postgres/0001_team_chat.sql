-- Accounts, rooms and who is in them, messages, and the mentions the mention job records.
-- Times are milliseconds since the epoch (the same on every backend).
CREATE TABLE users (
    id bigserial PRIMARY KEY,
    name text NOT NULL UNIQUE,
    password_hash text NOT NULL,
    created_at bigint NOT NULL
);
CREATE TABLE rooms (
    id bigserial PRIMARY KEY,
    name text NOT NULL UNIQUE,
    owner_id bigint NOT NULL REFERENCES users (id),
    message_count bigint NOT NULL DEFAULT 0,
    created_at bigint NOT NULL
);
CREATE TABLE members (
    room_id bigint NOT NULL REFERENCES rooms (id),
    user_id bigint NOT NULL REFERENCES users (id),
    PRIMARY KEY (room_id, user_id)
);
CREATE TABLE messages (
    id bigserial PRIMARY KEY,
    room_id bigint NOT NULL REFERENCES rooms (id),
    user_id bigint NOT NULL REFERENCES users (id),
    body text NOT NULL,
    created_at bigint NOT NULL
);
CREATE INDEX messages_room_newest ON messages (room_id, id DESC);
CREATE TABLE mentions (
    message_id bigint NOT NULL REFERENCES messages (id),
    user_id bigint NOT NULL REFERENCES users (id),
    PRIMARY KEY (message_id, user_id)
);
