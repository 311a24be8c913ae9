-- The team chat of /api: rooms, and their messages. Posting a message inserts it and bumps
-- its room's message_count and last_message_at in one transaction.
CREATE TABLE rooms (
    id UUID PRIMARY KEY,
    name TEXT NOT NULL CONSTRAINT rooms_name_unique UNIQUE
        CONSTRAINT rooms_name_not_empty CHECK (name <> ''),
    message_count INTEGER NOT NULL DEFAULT 0,
    last_message_at TIMESTAMPTZ,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE messages (
    id UUID PRIMARY KEY,
    room_id UUID NOT NULL REFERENCES rooms (id),
    author TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX messages_room_newest ON messages (room_id, created_at DESC, id DESC);
