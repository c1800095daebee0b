// Opens each HTML report page of `lab check --target --html` in Debian's Chromium, as a person
// opens it from a CI system's artifacts: at 1280 and 390 px, in the light and the dark colour
// scheme. For each, it checks: no console or script error; no request at all besides the page
// (the page must be self-contained); nothing wider than the window; every failed point drawn
// (the sequence diagrams counted against the points whose verdict is FAIL and against the failed
// points the page's headline names), each diagram visible with at least one request in it; and
// the dark scheme really dark. Saves a screenshot of each in --out.
//
// `cargo xtask browser-check` (or `cargo xtask report-check`) serves the pages and runs this:
//   node report.mjs --base http://127.0.0.1:PORT/ --pages a.html,b.html --out DIR --chromium PATH
// Every problem is printed as `FAIL <page> at <width> px <scheme>: <what>`, the figures as
// `report <page> at <width> px <scheme>: ...`; the exit code is 1 when there is a problem.

import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => {
    if (arg.startsWith('--')) pairs.push([arg.slice(2), all[i + 1]?.startsWith('--') ? true : all[i + 1] ?? true]);
    return pairs;
  }, []),
);
const base = new URL(args.base);
const names = String(args.pages).split(',').filter(Boolean);
const outDir = args.out ?? 'report-screenshots';
const WIDTHS = [1280, 390];
const SCHEMES = ['light', 'dark'];

let failures = 0;
let where = '';
const fail = (what) => {
  failures += 1;
  console.log(`FAIL ${where}: ${what}`);
};

mkdirSync(outDir, { recursive: true });
const profile = mkdtempSync(join(tmpdir(), 'lab-report-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: args.chromium ?? '/usr/bin/chromium',
  viewport: { width: 1280, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});

try {
  const page = await context.newPage();
  let requests = [];
  page.on('console', (message) => {
    if (message.type() === 'error') fail(`console error: ${message.text()}`);
  });
  page.on('pageerror', (error) => fail(`script error: ${error.message}`));
  page.on('request', (request) => requests.push(request.url()));
  for (const name of names) {
    const url = new URL(name, base).href;
    for (const width of WIDTHS) {
      for (const scheme of SCHEMES) {
        where = `${name} at ${width} px ${scheme}`;
        requests = [];
        await page.setViewportSize({ width, height: 900 });
        await page.emulateMedia({ colorScheme: scheme });
        const response = await page.goto(url, { waitUntil: 'load' });
        if (!response || !response.ok()) {
          fail(`HTTP ${response?.status()}`);
          continue;
        }
        const others = requests.filter((r) => r !== url);
        for (const other of others) fail(`loads ${other}: the page must be self-contained`);
        const found = await page.evaluate(() => {
          const doc = document.documentElement;
          const wide = [...document.querySelectorAll('body *')]
            .filter((e) => e.getBoundingClientRect().right > doc.clientWidth + 1)
            .map((e) => `${e.tagName.toLowerCase()}${e.className ? '.' + String(e.className).split(' ')[0] : ''} ("${(e.textContent ?? '').trim().slice(0, 40)}")`);
          const headline = document.querySelector('#verdict')?.textContent ?? '';
          const named = headline.startsWith('failed: ') ? headline.slice(8).split(', ').length : 0;
          const figures = [...document.querySelectorAll('figure.seq')];
          const hidden = figures.filter((f) => {
            const box = f.getBoundingClientRect();
            return box.width < 1 || box.height < 1 || getComputedStyle(f).visibility !== 'visible';
          }).map((f) => f.dataset.point);
          const empty = figures.filter((f) => !f.querySelector('.seq-req')).map((f) => f.dataset.point);
          const undrawn = [...document.querySelectorAll('section.point[data-verdict="Fail"]')]
            .filter((s) => !s.querySelector(`figure.seq[data-point="${s.id.replace(/^point-/, '')}"]`))
            .map((s) => s.id);
          const rgb = getComputedStyle(document.body).backgroundColor.match(/[\d.]+/g).map(Number);
          return {
            overflow: doc.scrollWidth - doc.clientWidth,
            wide: wide.slice(0, 5),
            failedSections: document.querySelectorAll('section.point[data-verdict="Fail"]').length,
            named,
            figures: figures.length,
            exchanges: document.querySelectorAll('figure.seq .seq-req').length,
            hidden,
            empty,
            undrawn,
            background: (rgb[0] + rgb[1] + rgb[2]) / 3,
          };
        });
        if (found.overflow > 0) fail(`scrolls sideways by ${found.overflow} px`);
        for (const element of found.wide) fail(`${element} reaches past the window`);
        if (found.figures !== found.failedSections || found.figures !== found.named) {
          fail(`${found.figures} sequence diagrams for ${found.failedSections} failed points (${found.named} named in the headline)`);
        }
        for (const point of found.undrawn) fail(`failed point ${point} has no sequence diagram`);
        for (const point of found.hidden) fail(`the diagram of ${point} is not visible`);
        for (const point of found.empty) fail(`the diagram of ${point} draws no request`);
        if (found.failedSections === 0) fail('the page shows no failed point: it must come from a failing run');
        const dark = found.background < 128;
        if (dark !== (scheme === 'dark')) fail(`the background is ${dark ? 'dark' : 'light'} in the ${scheme} scheme`);
        await page.screenshot({ path: join(outDir, `${name.replace(/\.html$/, '').replaceAll('/', '_')}-${width}-${scheme}.png`), fullPage: true });
        console.log(
          `report ${where}: ${found.figures} of ${found.failedSections} failed points drawn (${found.exchanges} exchanges), ` +
            `overflow ${Math.max(found.overflow, 0)} px, ${others.length} other requests`,
        );
      }
    }
  }
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(`report pages: ${names.length} pages x ${WIDTHS.length} widths x ${SCHEMES.length} schemes, ${failures} problems`);
if (failures > 0) process.exit(1);
