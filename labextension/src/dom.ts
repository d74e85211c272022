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
