/** Small DOM helpers; all text goes through `textContent`, never HTML. */

export type Attrs = { [name: string]: string | number | boolean | undefined };

/** Create an element with attributes and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Node | string | null | undefined)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) {
      continue;
    }
    if (name === 'className') {
      el.className = String(value);
    } else {
      el.setAttribute(name, value === true ? '' : String(value));
    }
  }
  for (const child of children) {
    if (child === null || child === undefined) {
      continue;
    }
    el.appendChild(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return el;
}

/** Set an element's text only when it changed (keeps selections and focus). */
export function setText(el: HTMLElement, text: string): void {
  if (el.textContent !== text) {
    el.textContent = text;
  }
}

/** Set or remove an attribute only when it changed. */
export function setAttr(el: HTMLElement, name: string, value: string | null): void {
  if (value === null) {
    if (el.hasAttribute(name)) {
      el.removeAttribute(name);
    }
  } else if (el.getAttribute(name) !== value) {
    el.setAttribute(name, value);
  }
}

/** Show or hide an element with the `hidden` attribute. */
export function setHidden(el: HTMLElement, hidden: boolean): void {
  if (el.hidden !== hidden) {
    el.hidden = hidden;
  }
}

/**
 * Show `items` in `list` as rows kept by key, in the items' order: a row is made once (`create`),
 * updated in place (`update`) and moved only when out of place; rows whose item is gone are removed.
 */
export function syncRows<T, R extends { node: HTMLElement }>(
  list: HTMLElement,
  rows: Map<string, R>,
  items: readonly T[],
  key: (item: T) => string,
  create: (key: string) => R,
  update: (row: R, item: T) => void
): void {
  const seen = new Set<string>();
  let previous: HTMLElement | null = null;
  for (const item of items) {
    const k = key(item);
    seen.add(k);
    let row = rows.get(k);
    if (!row) {
      row = create(k);
      rows.set(k, row);
    }
    update(row, item);
    const expected: ChildNode | null = previous ? previous.nextSibling : list.firstChild;
    if (expected !== row.node) {
      list.insertBefore(row.node, expected);
    }
    previous = row.node;
  }
  for (const [k, row] of rows) {
    if (!seen.has(k)) {
      row.node.remove();
      rows.delete(k);
    }
  }
}
