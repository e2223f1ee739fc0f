'use strict';
/**
 * The worker's spawner (activities/bash/spawner.ts): a small Node process that starts the worker's commands for it.
 * Node starts a child with fork(), which copies the parent's page tables on the calling thread: from a worker of
 * 460-640 MB that blocked the worker's event loop 10-12 ms per command (measured); from this process, about 1 ms.
 *
 * Plain JavaScript with no imports but Node's, so the same file runs from the sources and from dist/, started with
 * `node <this file>` and an IPC channel (advanced serialization: Buffers pass as they are). Messages, by command id:
 *   in:  spawn {file, args, cwd, env, detached, stdio: ('ignore'|'pipe'|{path})[]}, write {fd, data}, end {fd},
 *        destroy {fd}
 *   out: spawned {pid}, failed {message, code}, data {fd, data}, closed {fd}, exit {code, signal}, done (exited and
 *        every pipe closed: the last message about a child)
 * A `{path}` descriptor is opened read-only here and closed once the child has it (the runner's process tag).
 * It exits when the worker's channel closes (the worker died or let it go): sandboxed commands are bwrap's with
 * --die-with-parent, so they end with it, as they ended with the worker before.
 */
const { spawn } = require('node:child_process');
const { closeSync, openSync } = require('node:fs');

const children = new Map();

/** Messages written to the channel's socket but not yet flushed, beyond which a command's output pipe is paused. */
const BACKLOG = 16;

function send(message, flushed) {
  // A failed send means the worker's channel is gone: 'disconnect' follows, and this process exits.
  if (process.connected) process.send(message, () => flushed?.());
}

function start(id, request) {
  const opened = [];
  let child;
  try {
    const stdio = request.stdio.map((spec) => {
      if (spec === null || typeof spec !== 'object') return spec;
      const fd = openSync(spec.path, 'r');
      opened.push(fd);
      return fd;
    });
    child = spawn(request.file, request.args, { cwd: request.cwd, env: request.env, detached: request.detached, stdio });
  } catch (err) {
    send({ t: 'failed', id, message: err.message, code: err.code });
    return;
  } finally {
    for (const fd of opened) closeSync(fd);
  }
  children.set(id, child);
  child.once('error', (err) => {
    if (child.pid === undefined) {
      children.delete(id);
      send({ t: 'failed', id, message: err.message, code: err.code });
    }
  });
  child.once('spawn', () => send({ t: 'spawned', id, pid: child.pid }));
  request.stdio.forEach((spec, fd) => {
    const stream = child.stdio[fd];
    if (spec !== 'pipe' || !stream) return;
    stream.on('error', () => undefined); // a write to a gate whose reader is gone: the worker sees the exit
    if (!stream.readable) return;
    // Backpressure, as the pipe gave it to the command before: a worker that reads slower than the command writes
    // pauses the pipe here instead of growing this process's send queue.
    let backlog = 0;
    stream.on('data', (data) => {
      if (++backlog > BACKLOG) stream.pause();
      send({ t: 'data', id, fd, data }, () => {
        if (--backlog === 0 && stream.isPaused()) stream.resume();
      });
    });
    stream.once('close', () => send({ t: 'closed', id, fd }));
  });
  child.once('exit', (code, signal) => send({ t: 'exit', id, code, signal }));
  child.once('close', () => {
    children.delete(id);
    send({ t: 'done', id });
  });
}

process.on('message', (message) => {
  if (message.t === 'spawn') return start(message.id, message);
  const stream = children.get(message.id)?.stdio[message.fd];
  if (!stream) return;
  if (message.t === 'write') stream.write(message.data);
  else if (message.t === 'end') stream.end();
  else if (message.t === 'destroy') stream.destroy();
});
process.on('disconnect', () => process.exit(0));
