// Opens every page of the rendered book in Debian's Chromium and checks what a reader would meet:
// console errors, failed requests, internal links and anchors, diagrams, search, the dark theme,
// previous/next order and the print view. Saves a screenshot of every chapter in both themes.
//
// `cargo xtask browser-check` serves the book and runs this script; run it by hand with
//   node check.mjs --base http://127.0.0.1:PORT/ --book ../../book --out ../../target/browser-screenshots
// `--links-only` skips screenshots, search and themes (the negative control uses it); it still
// measures overflow. `--overflow-only` measures overflow and nothing else (the first-edition control).
// `--copied FILE` compares every Rust block's copy-button text with the copy check's
// (target/copied-blocks/copied.json).
// Every problem is printed as `FAIL <page>: <what>`; the exit code is 1 when there is any.

import { chromium } from 'playwright-core';
import { mkdtempSync, readdirSync, rmSync, mkdirSync, existsSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, sep } from 'node:path';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => {
    if (arg.startsWith('--')) pairs.push([arg.slice(2), all[i + 1]?.startsWith('--') ? true : all[i + 1] ?? true]);
    return pairs;
  }, []),
);
const base = new URL(args.base ?? 'http://127.0.0.1:3000/');
const bookDir = args.book ?? 'book';
const outDir = args.out ?? 'screenshots';
const linksOnly = Boolean(args['links-only']);
const overflowOnly = Boolean(args['overflow-only']);
const copiedFile = args.copied;
// The widths a reader meets: a laptop, and a phone held upright.
const WIDTHS = [1280, 390];
const OVERFLOW_THEMES = ['light', 'coal'];
const executablePath = args.chromium ?? '/usr/bin/chromium';

// Pages that are not chapters: the 404 page, the print view and the sidebar frame.
const NOT_CHAPTERS = new Set(['404.html', 'print.html', 'toc.html']);
// The themes mdBook calls dark.
const DARK_THEMES = ['coal', 'navy', 'ayu'];
// WCAG's minimum contrast for large text and graphics; body text in diagrams must reach 4.5.
const MIN_TEXT_CONTRAST = 4.5;
const MIN_GRAPHIC_CONTRAST = 3;
const SEARCHES = ['idempotency', 'BEGIN IMMEDIATE'];
// The smallest text a chart may draw at phone width, in CSS pixels.
const MIN_CHART_TEXT_PX = 9;

const failures = [];
// The page being checked, for the event handlers' FAIL lines.
let current = '';
const fail = (page, what) => {
  failures.push(`${page}: ${what}`);
  console.log(`FAIL ${page}: ${what}`);
};

function htmlFiles(dir) {
  const found = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) found.push(...htmlFiles(path));
    else if (entry.name.endsWith('.html')) found.push(relative(bookDir, path).split(sep).join('/'));
  }
  return found.sort();
}

mkdirSync(outDir, { recursive: true });
// The report pages of `lab check --html` in check-report/ are not chapters of the book: they have
// their own check (report.mjs, through `cargo xtask report-check`), and here only links to them.
const REPORTS = 'check-report/';
const pages = htmlFiles(bookDir).filter((p) => !p.startsWith(REPORTS));
const chapters = pages.filter((p) => !NOT_CHAPTERS.has(p));
const profile = mkdtempSync(join(tmpdir(), 'lab-chromium-'));
// A fresh profile each run: Playwright passes it to Chromium as --user-data-dir.
const context = await chromium.launchPersistentContext(profile, {
  executablePath,
  viewport: { width: 1280, height: 900 },
  colorScheme: 'light',
  // Playwright adds its own --headless; the rest are what Debian's Chromium needs in a container.
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});

try {
  // The book has no business leaving the loopback server.
  await context.route((url) => url.origin !== base.origin, (route) => {
    route.abort();
  });

  const ids = new Map(); // page -> Set of ids and names
  const links = []; // { from, href }
  const order = new Map(); // page -> { next, previous }
  let sidebar = null;
  const h1s = new Map();

  const page = await context.newPage();
  if (overflowOnly) {
    await overflowPass(page, chapters, false);
    console.log(`overflow: ${chapters.length} chapters at ${WIDTHS.join(' and ')} px, ${OVERFLOW_THEMES.join(' and ')} themes`);
  }
  page.on('console', (message) => {
    if (message.type() === 'error') fail(current, `console error: ${message.text()}`);
  });
  page.on('pageerror', (error) => fail(current, `script error: ${error.message}`));
  page.on('requestfailed', (request) => {
    // ERR_ABORTED is Chromium dropping a request of the page it is leaving (a favicon, a font
    // requested late by the layout) when the next navigation starts: not a failure of the book.
    // A missing file still fails, through the HTTP status check below.
    if (request.failure()?.errorText === 'net::ERR_ABORTED') return;
    fail(current, `request failed: ${request.url()} (${request.failure()?.errorText})`);
  });
  page.on('response', (response) => {
    if (response.status() >= 400) fail(current, `HTTP ${response.status()} for ${response.url()}`);
  });

  for (const name of overflowOnly ? [] : pages) {
    current = name;
    const response = await page.goto(new URL(name, base).href, { waitUntil: 'load' });
    if (!response || !response.ok()) continue; // already reported by the response handler
    // Fonts are requested when the layout first needs them, which can be after `load`.
    await page.evaluate(() => document.fonts.ready);
    const found = await page.evaluate(() => ({
      ids: [...document.querySelectorAll('[id], a[name]')].map((e) => e.id || e.getAttribute('name')),
      links: [...document.querySelectorAll('a[href]')].map((a) => a.href),
      next: document.querySelector('a.nav-chapters.next')?.href ?? null,
      previous: document.querySelector('a.nav-chapters.previous')?.href ?? null,
      // Chapter entries only: mdBook also lists the current page's headings there.
      sidebar: [...document.querySelectorAll('#mdbook-sidebar ol.chapter a[href]:not(.header-in-summary)')].map((a) => a.href),
      h1: document.querySelector('main h1')?.textContent.trim() ?? null,
    }));
    ids.set(name, new Set(found.ids));
    // The 404 page is served at any path, so its links are written for the site's root; skip them.
    if (name !== '404.html') for (const href of found.links) links.push({ from: name, href });
    order.set(name, { next: found.next, previous: found.previous });
    if (name === 'index.html') sidebar = found.sidebar;
    h1s.set(name, found.h1);
    if (NOT_CHAPTERS.has(name)) continue;

    const diagrams = await page.locator('svg.lab-plot, svg.lab-timeline').all();
    for (const [i, svg] of diagrams.entries()) {
      const box = await svg.boundingBox();
      if (!(await svg.isVisible()) || !box || box.width < 1 || box.height < 1) {
        fail(name, `diagram ${i + 1} is not visible (box ${JSON.stringify(box)})`);
      }
    }
    if (!linksOnly) {
      await checkContrast(page, name, 'light');
      await page.screenshot({ path: join(outDir, `${name.replace(/\.html$/, '').replaceAll('/', '_')}-light.png`), fullPage: true });
    }
  }

  if (overflowOnly) {
    // Nothing else is checked in this mode.
  } else {
  // Internal links and anchors. The server serves exactly the files in book/.
  let checkedLinks = 0;
  for (const { from, href } of links) {
    const url = new URL(href);
    if (url.origin !== base.origin) continue;
    let target = decodeURIComponent(url.pathname.slice(base.pathname.length));
    if (target === '' || target.endsWith('/')) target += 'index.html';
    checkedLinks += 1;
    if (!ids.has(target)) {
      if ((!target.endsWith('.html') || target.startsWith(REPORTS)) && existsSync(join(bookDir, target))) continue;
      fail(from, `links to ${target}, which does not exist`);
      continue;
    }
    const anchor = decodeURIComponent(url.hash.slice(1));
    if (anchor && !ids.get(target).has(anchor)) fail(from, `links to ${target}#${anchor}, which has no such anchor`);
  }

  // Previous/next follow the sidebar, which follows SUMMARY.md.
  if (!sidebar || sidebar.length === 0) fail('index.html', 'the sidebar lists no chapters');
  else {
    const reading = sidebar.map((href) => new URL(href).pathname.slice(base.pathname.length));
    for (const [i, name] of reading.entries()) {
      const nav = order.get(name);
      // index.html is a copy of the first chapter, with the same "next".
      if (i === 0 && order.get('index.html')?.next !== nav?.next) fail('index.html', '"next" differs from the first chapter\'s');
      if (!nav) continue;
      const expectNext = reading[i + 1] ?? null;
      const gotNext = nav.next ? new URL(nav.next).pathname.slice(base.pathname.length) : null;
      if (gotNext !== expectNext) fail(name, `"next" goes to ${gotNext}, but the reading order says ${expectNext}`);
    }
    for (const chapter of chapters) {
      if (chapter !== 'index.html' && !reading.includes(chapter)) fail(chapter, 'is not in the sidebar');
    }
  }

  // The print view holds every chapter's title.
  const printIds = ids.get('print.html');
  if (!printIds) fail('print.html', 'the print view is missing');
  else {
    current = 'print.html';
    await page.goto(new URL('print.html', base).href, { waitUntil: 'load' });
    const printed = await page.evaluate(() => [...document.querySelectorAll('main h1')].map((h) => h.textContent.trim()));
    for (const chapter of chapters) {
      const title = h1s.get(chapter);
      if (title && !printed.includes(title)) fail('print.html', `is missing the chapter "${title}" (${chapter})`);
    }
  }

  if (!linksOnly) {
    // Search, as a reader uses it: the S key, then typing.
    current = 'index.html';
    for (const term of SEARCHES) {
      await page.goto(new URL('index.html', base).href, { waitUntil: 'load' });
      await page.keyboard.press('s');
      await page.locator('#mdbook-searchbar').fill(term);
      await page.locator('#mdbook-searchbar').press('End'); // searcher.js listens to keyup
      try {
        await page.locator('#mdbook-searchresults li').first().waitFor({ state: 'visible', timeout: 15000 });
        const hits = await page.locator('#mdbook-searchresults li').count();
        console.log(`search "${term}": ${hits} results`);
      } catch {
        fail('index.html', `searching for "${term}" finds nothing`);
      }
    }

    // Dark themes: switch as a reader does, through the theme menu; it persists across pages.
    for (const theme of DARK_THEMES) {
      current = 'index.html';
      await page.goto(new URL('index.html', base).href, { waitUntil: 'load' });
      await page.locator('#mdbook-theme-toggle').click();
      await page.locator(`#mdbook-theme-${theme}`).click();
      const applied = await page.evaluate((t) => document.documentElement.classList.contains(t), theme);
      if (!applied) fail('index.html', `the theme switcher did not apply ${theme}`);
      for (const name of chapters) {
        current = name;
        await page.goto(new URL(name, base).href, { waitUntil: 'load' });
        await checkContrast(page, name, theme);
        if (theme === DARK_THEMES[0]) {
          await page.screenshot({ path: join(outDir, `${name.replace(/\.html$/, '').replaceAll('/', '_')}-dark.png`), fullPage: true });
        }
      }
    }
  }

  // Overflow: every code block, table, figure and image fits the text column, at each width and
  // theme; screenshots at phone width too.
  await overflowPass(page, chapters, !linksOnly);
  if (copiedFile) await compareCopied(page, JSON.parse(readFileSync(copiedFile, 'utf8')));

  console.log(
    `browser: ${pages.length} pages, ${checkedLinks} internal links, ${chapters.length} chapters` +
      (linksOnly ? '' : `, ${chapters.length * 4} screenshots in ${outDir}`),
  );
  }
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}

if (failures.length > 0) {
  console.log(`browser check: ${failures.length} problems`);
  process.exit(1);
}

// Every text and every coloured mark of every diagram must stand out from the page behind it.
async function checkContrast(page, name, theme) {
  const problems = await page.evaluate(
    ({ minText, minGraphic }) => {
      const rgb = (text) => {
        const m = text.match(/rgba?\(([\d.]+)[, ]+([\d.]+)[, ]+([\d.]+)(?:[, /]+([\d.]+))?\)/);
        return m ? { r: +m[1], g: +m[2], b: +m[3], a: m[4] === undefined ? 1 : +m[4] } : null;
      };
      const luminance = ({ r, g, b }) => {
        const c = [r, g, b].map((v) => {
          const s = v / 255;
          return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
        });
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
      };
      const contrast = (a, b) => {
        const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
        return (hi + 0.05) / (lo + 0.05);
      };
      const background = (element) => {
        for (let e = element; e; e = e.parentElement) {
          const c = rgb(getComputedStyle(e).backgroundColor);
          if (c && c.a > 0.5) return c;
        }
        return { r: 255, g: 255, b: 255, a: 1 };
      };
      const found = [];
      for (const [i, svg] of [...document.querySelectorAll('svg.lab-plot, svg.lab-timeline')].entries()) {
        const back = background(svg);
        const own = rgb(getComputedStyle(svg).color);
        if (!own || contrast(own, back) < minText) {
          found.push(`diagram ${i + 1}: its text colour ${getComputedStyle(svg).color} does not stand out from the background`);
        }
        for (const text of svg.querySelectorAll('text')) {
          if (!text.textContent.trim()) continue;
          const fill = rgb(getComputedStyle(text).fill);
          // The diagrams draw text straight on the page, never on a filled box.
          if (fill && contrast(fill, back) < minText) {
            found.push(`diagram ${i + 1}: text "${text.textContent.trim().slice(0, 40)}" has contrast ${contrast(fill, back).toFixed(2)}`);
            break;
          }
        }
        for (const mark of svg.querySelectorAll('line, path, polyline, polygon')) {
          const stroke = rgb(getComputedStyle(mark).stroke);
          if (stroke && stroke.a > 0.5 && getComputedStyle(mark).strokeWidth !== '0px' && contrast(stroke, back) < minGraphic) {
            found.push(`diagram ${i + 1}: a line has contrast ${contrast(stroke, back).toFixed(2)}`);
            break;
          }
        }
      }
      return found;
    },
    { minText: MIN_TEXT_CONTRAST, minGraphic: MIN_GRAPHIC_CONTRAST },
  );
  for (const problem of problems) fail(name, `${theme} theme: ${problem}`);
}

// Sets mdBook's theme as its theme menu does (it keeps the choice in localStorage).
async function setTheme(page, theme) {
  await page.goto(new URL('index.html', base).href, { waitUntil: 'load' });
  await page.evaluate((t) => localStorage.setItem('mdbook-theme', t), theme);
}

// Measures every pre, table, svg, figure, image and embedded report (iframe) of every chapter at
// each width and theme: an element that scrolls sideways (scrollWidth > clientWidth) or reaches
// past the text column fails, and an iframe wider than the column by any amount fails,
// named by page, width, theme and the element's first words. At 1280 px a listing whose lines wrap
// fails; at 390 px a chart whose text is under MIN_CHART_TEXT_PX fails, unless it is hidden and
// its table is shown instead.
async function overflowPass(page, names, screenshots) {
  let measured = 0;
  for (const theme of OVERFLOW_THEMES) {
    for (const width of WIDTHS) {
      await page.setViewportSize({ width, height: 900 });
      await setTheme(page, theme);
      for (const name of names) {
        current = name;
        await page.goto(new URL(name, base).href, { waitUntil: 'load' });
        await page.evaluate(() => document.fonts.ready);
        const found = await page.evaluate(({ width, wrapWidth, phoneWidth, minChartText }) => {
          const main = document.querySelector('main');
          if (!main) return { count: 0, problems: ['the page has no <main>'] };
          const column = main.getBoundingClientRect();
          const problems = [];
          let count = 0;
          const elements = main.querySelectorAll('pre, table, svg, figure, img, iframe');
          const seen = new Map();
          for (const el of elements) {
            // mdBook's own icons (copy button, header links) are not the book's figures.
            if (el.closest('button, .buttons, .fa-svg')) continue;
            if (el.tagName.toLowerCase() === 'svg' && el.parentElement?.closest('svg')) continue;
            const tag = el.tagName.toLowerCase();
            const n = (seen.get(tag) ?? 0) + 1;
            seen.set(tag, n);
            const box = el.getBoundingClientRect();
            if (box.width === 0 && box.height === 0) continue;
            count += 1;
            const words = (el.getAttribute('aria-label') ?? el.getAttribute('title') ?? el.textContent ?? el.getAttribute('src') ?? '')
              .trim().replace(/\s+/g, ' ').slice(0, 50);
            const what = `${tag} ${n} ("${words}")`;
            // mdBook's code element scrolls inside its pre, so both are measured.
            const scroller = [el, ...(tag === 'pre' ? el.querySelectorAll(':scope > code') : [])]
              .find((e) => e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1);
            // An embedded report page: its frame, borders included, within the column's width
            // (a width of 100% plus a border once drew it 2 px past the column).
            if (tag === 'iframe' && box.width > column.width) {
              problems.push(`${what} is wider than the text column: ${box.width} px, column ${column.width} px`);
            }
            if (scroller) {
              problems.push(`${what} scrolls sideways: scrollWidth ${scroller.scrollWidth} > clientWidth ${scroller.clientWidth}`);
            } else if (box.right > column.right + 1 || box.left < column.left - 1) {
              problems.push(`${what} reaches past the text column: ${Math.round(box.left)}..${Math.round(box.right)} px, column ${Math.round(column.left)}..${Math.round(column.right)} px`);
            }
          }
          // Listings (Rust blocks, and `rs` slices of the lab's source) at the laptop width: a
          // line that wraps is drawn as two, which misleads a reader about the code.
          if (width === wrapWidth) {
            for (const [i, code] of [...main.querySelectorAll('pre > code.language-rs, pre > code.language-rust')].entries()) {
              const lines = code.innerText.replace(/\n+$/, '').split('\n');
              const style = getComputedStyle(code);
              let lineHeight = parseFloat(style.lineHeight);
              if (Number.isNaN(lineHeight)) {
                const probe = document.createElement('span');
                probe.textContent = 'X';
                probe.style.display = 'block';
                code.appendChild(probe);
                lineHeight = probe.getBoundingClientRect().height;
                probe.remove();
              }
              const inner = code.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);
              const drawn = Math.round(inner / lineHeight);
              if (lineHeight > 0 && drawn > lines.length) {
                const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), '');
                problems.push(`listing ${i + 1} wraps: ${lines.length} lines drawn as ${drawn}; its longest line has ${longest.length} characters ("${longest.trim().slice(0, 50)}")`);
              }
            }
          }
          // Charts and diagrams at phone width: every text at least minChartText px, or the chart
          // hidden and its table shown in its place.
          if (width === phoneWidth) {
            for (const [i, svg] of [...main.querySelectorAll('svg.lab-plot, svg.lab-timeline, svg.lab-system')].entries()) {
              const box = svg.getBoundingClientRect();
              if (box.width === 0 && box.height === 0) {
                const replacement = svg.classList.contains('lab-timeline')
                  ? svg.closest('p, div, figure')?.nextElementSibling?.querySelector?.('table') ??
                    [...main.querySelectorAll('details.lab-timeline-text table')].find((t) => svg.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING)
                  : [...main.querySelectorAll('table')].find((t) => svg.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING);
                const shown = replacement && replacement.getBoundingClientRect().height > 0;
                if (!shown) problems.push(`chart ${i + 1} (${svg.getAttribute('class')}) is hidden and no table is shown in its place`);
                continue;
              }
              let smallest = Infinity;
              let smallestText = '';
              for (const text of svg.querySelectorAll('text')) {
                if (!text.textContent.trim()) continue;
                const matrix = text.getScreenCTM();
                const scale = matrix ? Math.hypot(matrix.a, matrix.b) : 1;
                const px = parseFloat(getComputedStyle(text).fontSize) * scale;
                if (px < smallest) {
                  smallest = px;
                  smallestText = text.textContent.trim().slice(0, 40);
                }
              }
              if (smallest < minChartText) {
                problems.push(`chart ${i + 1} (${svg.getAttribute('class')}) draws text at ${smallest.toFixed(1)} px ("${smallestText}"), under ${minChartText} px`);
              }
            }
          }
          return { count, problems };
        }, { width, wrapWidth: WIDTHS[0], phoneWidth: WIDTHS[1], minChartText: MIN_CHART_TEXT_PX });
        measured += found.count;
        for (const problem of found.problems) fail(name, `overflow at ${width} px, ${theme} theme: ${problem}`);
        if (screenshots && width === 390) {
          await page.screenshot({ path: join(outDir, `${name.replace(/\.html$/, '').replaceAll('/', '_')}-phone-${theme}.png`), fullPage: true });
        }
      }
    }
  }
  await page.setViewportSize({ width: 1280, height: 900 });
  await setTheme(page, 'light');
  console.log(`overflow: ${measured} elements measured on ${names.length} pages at ${WIDTHS.join(' and ')} px in ${OVERFLOW_THEMES.join(' and ')}`);
}

// The copy button's text, taken by the page's own playground_text(pre, false) (what book.js's
// clipboard handler copies), must equal what the copy check compiled.
async function compareCopied(page, expected) {
  let compared = 0;
  for (const [name, texts] of Object.entries(expected)) {
    current = name;
    await page.goto(new URL(name, base).href, { waitUntil: 'load' });
    const copied = await page.evaluate(() =>
      [...document.querySelectorAll('main pre > code.language-rust')].map((code) =>
        // eslint-disable-next-line no-undef
        playground_text(code.parentElement, false)));
    if (copied.length !== texts.length) {
      fail(name, `copy text: the page has ${copied.length} Rust blocks, the copy check compiled ${texts.length}`);
      continue;
    }
    for (const [i, text] of texts.entries()) {
      compared += 1;
      if (copied[i].replace(/\s+$/, '') !== text.replace(/\s+$/, '')) {
        fail(name, `copy text of Rust block ${i + 1} differs from what the copy check compiled: ${JSON.stringify(copied[i].slice(0, 200))}`);
      }
    }
  }
  console.log(`copy text: ${compared} Rust blocks copied in the browser match the copy check's`);
}
