// A unit of work on a SQLite connection of this process: the SQLite store's writer on its file, or the memory
// store's private database of the tools' tables. Both send a statement the same way and tell the same errors apart;
// each store says how it begins, ends and gives the connection back.

import { type Db, changedRows, messageOf, rowsOf, storeFailure } from "./sqlite-statements.js";
import { BaseTransaction, type Row, StoreUnavailable } from "./stores.js";

export abstract class SQLiteConnectionTransaction extends BaseTransaction<Db> {
  begun = false; // BEGIN ran: this unit of work holds the connection (and this process's turn) until it ends

  /** `where` names the store; `rolledBack` is what a statement meets after SQLite rolled the transaction back. */
  constructor(where: string, private readonly rolledBack: string) {
    super(where);
  }

  /** The connection its statements run on. */
  protected abstract readonly db: Db;

  /** Take this process's turn on the connection, then BEGIN, setting `begun`. */
  protected abstract begin(): Promise<void>;

  /** A store failure, named for the log. */
  protected failed(error: unknown): StoreUnavailable {
    return error instanceof StoreUnavailable ? error : new StoreUnavailable(`${this.where}: ${messageOf(error)}`);
  }

  /** The store's failures: its own (the turn not given, SQLite's rollback) and SQLite's; any other is the tool's. */
  protected failureOf(error: unknown): StoreUnavailable | null {
    return error instanceof StoreUnavailable || storeFailure(error) ? this.failed(error) : null;
  }

  protected async send<T>(statement: (db: Db) => T | Promise<T>): Promise<T> {
    if (!this.begun) await this.begin();
    else if (!this.db.inTransaction) throw new StoreUnavailable(this.rolledBack);
    for (const name of this.pending()) this.db.exec(`SAVEPOINT ${name}`);
    return statement(this.db);
  }

  async execute(sql: string, ...args: unknown[]): Promise<number> {
    return this.run((db) => changedRows(db, sql, args));
  }

  async fetchall(sql: string, ...args: unknown[]): Promise<Row[]> {
    return this.run((db) => rowsOf(db, sql, args));
  }
}
