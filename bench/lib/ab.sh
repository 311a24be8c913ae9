# Shared by bench/ab.sh and bench/ab_ws.sh: source it from the repository's top.

# ref_worktree REF: checks REF out in target/ab-worktree (made on first use); sets `commit`
# (REF's hash), `repo` (the top) and `worktree` (its path).
ref_worktree() {
    commit=$(git rev-parse --verify "$1^{commit}")
    repo=$PWD
    worktree=$repo/target/ab-worktree
    if [ -d "$worktree" ]; then
        git -C "$worktree" checkout -q --detach "$commit"
    else
        git worktree add -q --detach "$worktree" "$commit"
    fi
}

# group_cpu PGID: "utime stime", in clock ticks, of every process in process group PGID.
group_cpu() {
    local user=0 kernel=0 pid fields
    for pid in $(pgrep -g "$1"); do
        # The fields after the command name (which may hold spaces): utime is the 12th.
        fields=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
        read -r -a f <<<"$fields"
        user=$((user + f[11]))
        kernel=$((kernel + f[12]))
    done
    echo "$user $kernel"
}

# stop_group LEADER: SIGTERM to LEADER's process group, SIGKILL after 5 s, and reaps it.
stop_group() {
    kill -TERM -- "-$1" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
