// How long a unit of work waits for its store's one writer, and the turn it waits in: the SQLite store's and the
// memory store's (each runs the tools' statements on one SQLite connection, one unit of work at a time).

import { type Limits, StoreUnavailable } from "./stores.js";

// The longest any write waits for the file, as the Python library's LONGEST_WAIT: a unit of work that waited most of
// its lease would find its key taken over anyway; failing sooner gives the key back while the client still retries.
export const LONGEST_WAIT = 10;

/** How long a write may wait for the file, as the Python library's Limits.wait. */
export function waitOf(limits: Limits): number {
  return Math.min(LONGEST_WAIT, limits.lease / 3);
}

/** A lock taken in turn, waiting a bounded time: else the store is unavailable, for `why`. */
export class Turn {
  held = false;
  readonly queue: (() => void)[] = [];

  async take(seconds: number, why: string): Promise<void> {
    if (!this.held) {
      this.held = true;
      return;
    }
    await new Promise<void>((done, refused) => {
      const next = () => { clearTimeout(timer); done(); };
      const timer = setTimeout(() => {
        this.queue.splice(this.queue.indexOf(next), 1);
        refused(new StoreUnavailable(why));
      }, seconds * 1000);
      this.queue.push(next);
    });
  }

  release(): void {
    const next = this.queue.shift();
    if (next === undefined) this.held = false;
    else next(); // handed on: still held
  }
}
