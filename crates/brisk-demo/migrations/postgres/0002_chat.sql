-- The team chat of /api: rooms, and their messages. Posting a message inserts it and bumps
-- its room's message_count and last_message_at in one transaction.
CREATE TABLE rooms (
    id uuid PRIMARY KEY,
    name text NOT NULL,
    message_count bigint NOT NULL DEFAULT 0,
    last_message_at timestamptz,
    created_at timestamptz NOT NULL,
    CONSTRAINT rooms_name_unique UNIQUE (name),
    CONSTRAINT rooms_name_not_empty CHECK (name <> '')
);
CREATE TABLE messages (
    id uuid PRIMARY KEY,
    room_id uuid NOT NULL REFERENCES rooms (id),
    author text NOT NULL,
    text text NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX messages_room_newest ON messages (room_id, created_at DESC, id DESC);
