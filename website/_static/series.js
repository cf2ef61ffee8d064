/* What the series' site adds to the theme's pages (website/conf.py loads it on every page). */
"use strict";

/* The menu and the page-contents buttons, at every width.
 *
 * WORKAROUND for an upstream bug, to remove when the themes fix it: pydata-sphinx-theme
 * (#2451) and sphinx-book-theme (#988) bind the drawers' handlers to the FIRST
 * `.primary-toggle` and `.secondary-toggle` of the page, the buttons of pydata's own header,
 * which the book theme hides; the buttons a reader sees (in the article's header) do nothing:
 * below 992 px the menu and the contents never open, and on a desktop the "collapse sidebar"
 * button does nothing. A click on a visible button is handed to the first one of its kind,
 * which has the theme's handlers (the dialog below 992 px, the collapse above).
 * tests/test_site.py opens and closes both drawers at phone and tablet sizes; once the themes
 * bind their handlers to every button, delete this block and the test still passes. */
function seriesForwardSidebarToggles() {
  for (const kind of ["primary-toggle", "secondary-toggle"]) {
    const buttons = document.querySelectorAll(`.${kind}`);
    const bound = buttons[0];
    buttons.forEach((button, i) => {
      if (i === 0) return;
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        bound.click();
      });
    });
  }
}

/* Names for the theme's controls (axe-core's "serious" findings): the chevrons that open a
 * section of the table of contents are <summary> elements holding only an icon, with no name;
 * the search buttons are named "Search" while they show "Search… Ctrl+K", and a name must
 * contain the words a reader sees (a voice user says what they see): their text names them. */
function seriesNameUnnamedControls() {
  document.querySelectorAll("button.search-button-field[aria-label]").forEach((button) => {
    if (button.textContent.trim()) button.removeAttribute("aria-label");
  });
  document.querySelectorAll("nav summary").forEach((summary) => {
    if (!summary.textContent.trim() && !summary.getAttribute("aria-label")) {
      const link = summary.parentElement.parentElement.querySelector(":scope > a");
      const what = link ? link.textContent.trim() : "this section";
      summary.setAttribute("aria-label", `Show or hide the pages under ${what}`);
    }
  });
}

/* A "copy" button on every block of code (no extension, nothing from elsewhere). */
function seriesCopyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    return navigator.clipboard.writeText(text);
  }
  const area = document.createElement("textarea"); // plain http: the old way
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.appendChild(area);
  area.select();
  const copied = document.execCommand("copy");
  area.remove();
  return copied ? Promise.resolve() : Promise.reject(new Error("copy refused"));
}

function seriesAddCopyButtons() {
  document.querySelectorAll("article div.highlight > pre").forEach((pre) => {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "series-copy";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy this code");
    button.addEventListener("click", () => {
      const text = pre.innerText.replace(/\n$/, "");
      seriesCopyText(text).then(
        () => (button.textContent = "Copied"),
        () => (button.textContent = "Select and copy"),
      );
      setTimeout(() => (button.textContent = "Copy"), 2000);
    });
    pre.parentElement.classList.add("series-has-copy");
    pre.parentElement.appendChild(button);
  });
}

function seriesWhenReady(callback) {
  if (document.readyState !== "loading") callback();
  else document.addEventListener("DOMContentLoaded", callback);
}

seriesWhenReady(seriesForwardSidebarToggles);
seriesWhenReady(seriesNameUnnamedControls);
seriesWhenReady(seriesAddCopyButtons);
