// Opens each page of a cairn report in headless Chromium (the executable given, Debian's), and prints
// one JSON array: what each page rendered (its width against the window, its headings, tables and
// pictures with their boxes, its visible text) and the path of a full-page screenshot.
// Usage: node render.mjs CHROMIUM OUT_DIR WIDTH URL...
import { chromium } from "playwright-core";

const [executablePath, outDir, width, ...urls] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath,
  // as root, with no network: no sandbox, and nothing that phones out at start-up
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const results = [];
try {
  const page = await browser.newPage({ viewport: { width: Number(width), height: 900 } });
  for (const [i, url] of urls.entries()) {
    await page.goto(url, { waitUntil: "load" });
    const rendered = await page.evaluate(() => {
      const box = (el) => {
        const r = el.getBoundingClientRect();
        return { x: r.x, y: r.y + window.scrollY, width: r.width, height: r.height };
      };
      return {
        title: document.title,
        scrollWidth: document.documentElement.scrollWidth,
        clientWidth: document.documentElement.clientWidth,
        headings: [...document.querySelectorAll("h1, h2, h3")].map((h) => ({
          tag: h.tagName.toLowerCase(),
          text: h.innerText,
          box: box(h),
        })),
        tables: [...document.querySelectorAll("table")].map((t) => ({
          class: t.className,
          rows: [...t.rows].map((r) => [...r.cells].map((c) => c.innerText)),
          box: box(t),
          // the table's own scroller, when it is wider than the room it has
          scrolls: t.parentElement.scrollWidth > t.parentElement.clientWidth,
        })),
        pictures: [...document.querySelectorAll("img, object, embed")].map((p) => ({
          src: p.getAttribute("src") || p.getAttribute("data"),
          loaded: p.tagName === "IMG" ? p.complete && p.naturalWidth > 0 : true,
          box: box(p),
        })),
        text: document.body.innerText,
      };
    });
    const screenshot = `${outDir}/page-${i}.png`;
    await page.screenshot({ path: screenshot, fullPage: true });
    results.push({ url, screenshot, ...rendered });
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify(results));
