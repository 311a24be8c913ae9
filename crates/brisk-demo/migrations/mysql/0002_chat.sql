-- The team chat of /api: rooms, and their messages. Posting a message inserts it and bumps
-- its room's message_count and last_message_at in one transaction. Instants are TIMESTAMP
-- (MySQL's DATETIME has no zone, and reads as a naive date and time).
CREATE TABLE rooms (
    id CHAR(36) CHARACTER SET ascii PRIMARY KEY,
    name VARCHAR(200) CHARACTER SET utf8mb4 NOT NULL,
    message_count BIGINT NOT NULL DEFAULT 0,
    last_message_at TIMESTAMP(6) NULL DEFAULT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    CONSTRAINT rooms_name_unique UNIQUE (name),
    CONSTRAINT rooms_name_not_empty CHECK (name <> '')
) ENGINE=InnoDB;
CREATE TABLE messages (
    id CHAR(36) CHARACTER SET ascii PRIMARY KEY,
    room_id CHAR(36) CHARACTER SET ascii NOT NULL,
    author VARCHAR(200) CHARACTER SET utf8mb4 NOT NULL,
    text TEXT CHARACTER SET utf8mb4 NOT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    CONSTRAINT messages_room FOREIGN KEY (room_id) REFERENCES rooms (id),
    INDEX messages_room_newest (room_id, created_at, id)
) ENGINE=InnoDB;
