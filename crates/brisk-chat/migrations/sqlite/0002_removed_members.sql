-- Who a room's owner took out: they cannot join it again by themselves (the owner adds them
-- back, which lifts this).
CREATE TABLE removed_members (
    room_id INTEGER NOT NULL REFERENCES rooms (id),
    user_id INTEGER NOT NULL REFERENCES users (id),
    PRIMARY KEY (room_id, user_id)
);
