/**
 * A minimal XML reader for EC2's Query API answers: elements, their text and the five predefined entities plus
 * numeric character references. EC2 carries no data in attributes (only xmlns), so attributes are skipped;
 * prefixes are dropped from names, comments, processing instructions and the prolog are skipped, CDATA is
 * text. Not a general XML parser: it trusts the document to be well formed enough to be EC2's.
 */

export interface XmlElement {
  name: string;
  children: XmlElement[];
  /** The element's own character data (its children's excluded), entities decoded. */
  text: string;
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

/** Decodes &amp; &lt; &gt; &quot; &apos; &#N; &#xN;; an unknown entity is an error rather than silent text. */
export function decodeEntities(s: string): string {
  return s.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|[a-zA-Z]+);/g, (_, e: string) => {
    if (e[0] === '#') return String.fromCodePoint(e[1] === 'x' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10));
    const v = ENTITIES[e];
    if (v === undefined) throw new XmlError(`unknown entity &${e};`);
    return v;
  });
}

export class XmlError extends Error {
  override name = 'XmlError';
}

/** The end of the markup starting at `i` that ends with `close`, past it. */
function skipPast(xml: string, i: number, close: string): number {
  const j = xml.indexOf(close, i);
  if (j < 0) throw new XmlError(`unterminated markup at ${i}`);
  return j + close.length;
}

const localName = (tag: string): string => tag.slice(tag.indexOf(':') + 1);

/** Parses a document into its root element. */
export function parseXml(xml: string): XmlElement {
  const root: XmlElement = { name: '', children: [], text: '' };
  const stack: XmlElement[] = [root];
  let i = 0;
  while (i < xml.length) {
    const lt = xml.indexOf('<', i);
    const top = stack[stack.length - 1]!;
    if (lt < 0 || lt > i) {
      const end = lt < 0 ? xml.length : lt;
      if (stack.length > 1) top.text += decodeEntities(xml.slice(i, end));
      i = end;
      continue;
    }
    if (xml.startsWith('<!--', i)) i = skipPast(xml, i, '-->');
    else if (xml.startsWith('<![CDATA[', i)) {
      const end = skipPast(xml, i, ']]>');
      top.text += xml.slice(i + 9, end - 3);
      i = end;
    } else if (xml[i + 1] === '?' || xml[i + 1] === '!') i = skipPast(xml, i, '>');
    else if (xml[i + 1] === '/') i = closeTag(xml, i, stack);
    else i = openTag(xml, i, stack);
  }
  if (stack.length !== 1) throw new XmlError(`<${stack[stack.length - 1]!.name}> is not closed`);
  const [doc] = root.children;
  if (!doc || root.children.length > 1) throw new XmlError('a document has exactly one root element');
  return doc;
}

/** `<name attr="..." ...>` or `<name .../>` at `i`: attributes are skipped (quoted values may hold '>'). */
function openTag(xml: string, i: number, stack: XmlElement[]): number {
  const m = /^<([^\s/>]+)((?:\s+[^\s=/>]+\s*=\s*(?:"[^"]*"|'[^']*'))*)\s*(\/?)>/.exec(xml.slice(i, i + 4096));
  if (!m) throw new XmlError(`bad tag at ${i}`);
  const el: XmlElement = { name: localName(m[1]!), children: [], text: '' };
  stack[stack.length - 1]!.children.push(el);
  if (!m[3]) stack.push(el);
  return i + m[0].length;
}

function closeTag(xml: string, i: number, stack: XmlElement[]): number {
  const end = skipPast(xml, i, '>');
  const name = localName(xml.slice(i + 2, end - 1).trim());
  const open = stack.pop();
  if (!open || stack.length === 0 || open.name !== name) throw new XmlError(`</${name}> closes <${open?.name ?? ''}>`);
  return end;
}

/** The first child of that name. */
export const child = (el: XmlElement | undefined, name: string): XmlElement | undefined => el?.children.find((c) => c.name === name);

/** The text of the child at this path (a/b/c), undefined when one is missing. */
export function textAt(el: XmlElement | undefined, path: string): string | undefined {
  let at = el;
  for (const name of path.split('/')) at = child(at, name);
  return at?.text;
}

/** The `<item>` elements of the list `setName` (EC2's lists: `<fooSet><item>...</item></fooSet>`), [] when absent. */
export const items = (el: XmlElement | undefined, setName: string): XmlElement[] =>
  (child(el, setName)?.children ?? []).filter((c) => c.name === 'item');
