//! Starting one worker process: its descriptors (the control channel, its listening socket),
//! its environment, and the task that reads its messages.

use super::*;

impl Supervisor {
    /// Starts one worker process for `slot`.
    pub(super) fn spawn(self: &Rc<Self>, slot: usize) -> std::io::Result<Rc<Worker>> {
        let (service, index) = self.slots[slot];
        let plan = &self.plan;
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        // Move the child's descriptors above the numbers they get in the child (3 and 4), so
        // the dup2 calls after fork cannot clobber each other.
        let ipc_hi = dup_high(theirs.as_raw_fd())?;
        drop(theirs);
        // A custom process has no socket.
        let listen_hi = plan.services[service]
            .listen_fd(index)
            .map(dup_high)
            .transpose()?;
        let mut cmd = tokio::process::Command::new(&plan.exe);
        cmd.args(&plan.args)
            .env(ENV_WORKER, format!("{service}:{index}"))
            .env(ENV_IPC_FD, "3")
            .env(ENV_IPC_VERSION, ipc::IPC_VERSION.to_string())
            .stdin(Stdio::null());
        if listen_hi.is_some() {
            cmd.env(ENV_LISTEN_FD, "4");
        } else {
            cmd.env_remove(ENV_LISTEN_FD);
        }
        let secrets_hi = crate::secret_env::pass_to(cmd.as_std_mut())?;
        let (handover, their_handover) = crate::ipc::fds::seqpacket_pair()?;
        let handover_hi = dup_high(their_handover.as_raw_fd())?;
        drop(their_handover);
        cmd.env(ENV_HANDOVER_FD, HANDOVER_FD.to_string());
        // Workers are not background masters, whatever the master is; and only the master
        // speaks to systemd.
        cmd.env_remove(ENV_DAEMON)
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID");
        if let Some(gid) = plan.gid {
            cmd.as_std_mut().gid(gid);
        }
        if let Some(uid) = plan.uid {
            cmd.as_std_mut().uid(uid);
        }
        let ipc_raw = ipc_hi.as_raw_fd();
        let listen_raw = listen_hi.as_ref().map(|fd| fd.as_raw_fd());
        let secrets_raw = secrets_hi.as_ref().map(|fd| fd.as_raw_fd());
        let handover_raw = handover_hi.as_raw_fd();
        // SAFETY: only async-signal-safe calls (prctl, dup2) run between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                if libc::dup2(ipc_raw, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(fd) = listen_raw {
                    if libc::dup2(fd, 4) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some(fd) = secrets_raw {
                    if libc::dup2(fd, crate::secret_env::SECRETS_FD) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if libc::dup2(handover_raw, HANDOVER_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        drop(ipc_hi);
        drop(listen_hi);
        drop(secrets_hi);
        drop(handover_hi);
        let pid = child.id().unwrap_or(0) as i32;
        ours.set_nonblocking(true)?;
        let stream = tokio::net::UnixStream::from_std(ours)?;
        let (rd, wr) = stream.into_split();
        let (mut rd, mut wr) = (ipc::reader(rd), ipc::writer(wr));
        let (tx, mut rx) = mpsc::unbounded_channel::<Outgoing>();
        let (ready_tx, ready_rx) = oneshot::channel();
        let queued = Rc::new(Cell::new(0usize));
        let channel = Rc::new(Channel {
            tx,
            queued: queued.clone(),
            replies: RefCell::new(HashMap::new()),
            next_question: Cell::new(0),
            closed: Cell::new(false),
            read_to_end: Notify::new(),
            ready: RefCell::new(Some(ready_tx)),
        });
        let worker = Rc::new(Worker {
            pid,
            slot,
            started: Instant::now(),
            channel: channel.clone(),
            ready: RefCell::new(Some(ready_rx)),
            retiring: Cell::new(false),
            recycle: Default::default(),
            keeping: Cell::new(true),
            forwarding: conn_handover::forwarding(handover.try_clone()?, channel.clone()),
            handover,
        });
        self.live.borrow_mut().insert(pid, worker.clone());
        tokio::task::spawn_local(async move {
            while let Some(msg) = rx.recv().await {
                let written = match msg {
                    Outgoing::Broadcast {
                        topic,
                        stamp,
                        broadcast,
                    } => {
                        let written = write_broadcast(&mut wr, &topic, stamp, &broadcast).await;
                        queued.set(queued.get().saturating_sub(broadcast.len()));
                        written
                    }
                    Outgoing::Msg(msg) => write_msg(&mut wr, &msg).await,
                };
                if written.is_err() {
                    return;
                }
            }
        });
        let sup = self.clone();
        tokio::task::spawn_local(async move {
            while let Ok(Some(packet)) = read_packet::<_, ToMaster>(&mut rd).await {
                let msg = match packet {
                    Packet::Broadcast {
                        topic,
                        stamp,
                        broadcast,
                    } => {
                        sup.relay_broadcast(pid, &topic, stamp, &broadcast);
                        if let Some(bus) = &sup.cluster {
                            bus.publish(&topic, &broadcast);
                        }
                        continue;
                    }
                    Packet::Msg(m) => m,
                };
                match msg {
                    ToMaster::Ready => {
                        if let Some(r) = channel.ready.borrow_mut().take() {
                            let _ = r.send(Ok(()));
                        }
                    }
                    ToMaster::Failed(reason) => {
                        tracing::error!(pid, "{reason}");
                        if let Some(r) = channel.ready.borrow_mut().take() {
                            let _ = r.send(Err(NotReady::Failed(reason)));
                        }
                    }
                    ToMaster::Final(s) => {
                        sup.observed.looks.borrow_mut().insert(pid, *s);
                    }
                    ToMaster::GroupJoined(group) => {
                        if let Some(bus) = &sup.cluster {
                            bus.joined(pid, &group);
                        }
                    }
                    ToMaster::KeepingStopped => sup.keeping_stopped(pid),
                    ToMaster::GroupLeft(group) => {
                        // A stopping worker's members may be on their way to a new worker:
                        // the group stays subscribed until it exits.
                        let retiring = sup
                            .live
                            .borrow()
                            .get(&pid)
                            .is_some_and(|w| w.retiring.get());
                        if let Some(bus) = sup.cluster.as_ref().filter(|_| !retiring) {
                            bus.left(pid, &group);
                        }
                    }
                    ToMaster::JobDone { job, run, error } => {
                        if let Some((scheduler, _)) = &sup.scheduler {
                            scheduler.end_run(pid, job, run, error);
                        }
                    }
                    ToMaster::Recycle(cause) => sup.want_recycle(pid, cause),
                    ToMaster::Detached { count } => sup.pass_on_handed_over(pid, count),
                    ToMaster::Answer { id, answer } => {
                        if let Answer::Status(s) = &answer {
                            sup.observed.looks.borrow_mut().insert(pid, (**s).clone());
                        }
                        if let Some(waiter) = channel.replies.borrow_mut().remove(&id) {
                            let _ = waiter.send(answer);
                        }
                    }
                }
            }
            // The channel closes when the worker exits: nothing more will come from it (those
            // waiting on an answer get none at once, instead of at their timeout), and its
            // counters as last seen are its totals.
            channel.closed.set(true);
            channel.read_to_end.notify_waiters();
            channel.replies.borrow_mut().clear();
            sup.bus_worker_gone(pid);
            if let Some(s) = sup.observed.looks.borrow_mut().remove(&pid) {
                sup.observed.retired.borrow_mut().add(&s);
            }
            if let Some((scheduler, _)) = &sup.scheduler {
                scheduler.worker_gone(pid);
            }
        });
        let sup = self.clone();
        let read = worker.channel.clone();
        tokio::task::spawn_local(async move {
            let status = child.wait().await;
            // What it wrote before it exited (connections it handed over, its last
            // broadcasts) is read first: the exit ends a retirement, and what follows it (a
            // new worker told no more connections come, an upgrade's bridge closed) must
            // come after them. Bounded: a process it started may hold its channel open.
            let end = read.read_to_end.notified();
            if !read.closed.get() {
                let _ = tokio::time::timeout(CHANNEL_END_WAIT, end).await;
            }
            sup.on_exit(pid, status.ok());
        });
        tracing::debug!(pid, service, index, "worker started");
        Ok(worker)
    }
}
