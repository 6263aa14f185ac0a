/**
 * Route export: each address block the node owns becomes `<block> dev lo table <export-table> proto <id>`,
 * for BIRD (or any routing daemon) to import and advertise. sync() makes the table exactly the given set
 * (only routes of our protocol are touched).
 */
import { isExistsError, isNotFoundError, link, route, type Netns } from '@cnikit/netlib';

export class RouteExporter {
  private loIndex: number | undefined;

  constructor(
    private readonly ns: Netns,
    private readonly tableId: number,
    private readonly protocolId: number,
  ) {}

  private async lo(): Promise<number> {
    this.loIndex ??= (await link.get(this.ns, 'lo')).index;
    return this.loIndex;
  }

  async add(cidr: string): Promise<void> {
    try {
      await route.add(this.ns, { dst: cidr, oif: await this.lo(), table: this.tableId, protocol: this.protocolId, scope: 253 });
    } catch (err) {
      if (!isExistsError(err)) throw err;
    }
  }

  async remove(cidr: string): Promise<void> {
    try {
      await route.del(this.ns, { dst: cidr, table: this.tableId, protocol: this.protocolId });
    } catch (err) {
      if (!isNotFoundError(err)) throw err;
    }
  }

  async list(): Promise<string[]> {
    const rs = [
      ...(await route.list(this.ns, { table: this.tableId, family: 4 })),
      ...(await route.list(this.ns, { table: this.tableId, family: 6 })),
    ];
    return rs.filter((r) => r.protocol === this.protocolId && r.table === this.tableId).map((r) => r.dst);
  }

  async sync(cidrs: string[]): Promise<void> {
    const want = new Set(cidrs);
    const have = await this.list();
    for (const c of have) if (!want.has(c)) await this.remove(c);
    for (const c of want) if (!have.includes(c)) await this.add(c);
  }
}
