/** Whether a process with this pid exists (EPERM: it exists but belongs to someone else). Used for pid/lock files. */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
