/* The live locks page: countdowns, and rows that refresh themselves.
 *
 * Each .drl-countdown counts down from its data-ttl-ms. A countdown that reaches zero says
 * "renewal due", never "expired": a hold may be renewed around then, and the next refresh
 * (asked for at once) shows its new TTL, or that it is gone. (Holds kept with auto_renew
 * show "renewed" instead of a countdown.) Each .drl-held counts up from its data-held-ms:
 * how long a hold has been held, or a waiter has waited.
 *
 * #drl-live (the list page) is fetched again every data-refresh-seconds, from
 * data-refresh-url, and replaced in place: new holders appear, released ones go. Refreshing
 * pauses while the pointer is over the rows or the keyboard focus is in them (the operator
 * is about to act on one) and while the page is hidden.
 */
"use strict";
(function () {
  const live = document.getElementById("drl-live");
  let shownAt = performance.now();
  let lastRefresh = performance.now();
  let busy = false;

  function duration(seconds) {
    if (seconds < 60) {
      return seconds.toFixed(1) + " s";
    }
    const whole = Math.floor(seconds);
    if (whole < 3600) {
      return Math.floor(whole / 60) + " min " + (whole % 60) + " s";
    }
    return Math.floor(whole / 3600) + " h " + Math.floor((whole % 3600) / 60) + " min";
  }

  function countdowns() {
    const elapsed = performance.now() - shownAt;
    let due = false;
    for (const counter of document.querySelectorAll(".drl-held[data-held-ms]")) {
      counter.textContent = duration((Number(counter.dataset.heldMs) + elapsed) / 1000);
    }
    for (const counter of document.querySelectorAll(".drl-countdown[data-ttl-ms]")) {
      const left = (Number(counter.dataset.ttlMs) - elapsed) / 1000;
      if (left > 0) {
        counter.textContent = left.toFixed(1) + " s";
        counter.classList.remove("drl-due");
      } else {
        counter.textContent = "renewal due";
        counter.classList.add("drl-due");
        due = true;
      }
    }
    return due;
  }

  function paused() {
    return (
      document.hidden ||
      live.matches(":hover") ||
      (document.activeElement !== null && live.contains(document.activeElement))
    );
  }

  async function refresh() {
    if (busy || paused()) {
      return;
    }
    busy = true;
    lastRefresh = performance.now();
    try {
      const response = await fetch(live.dataset.refreshUrl, {
        credentials: "same-origin",
        headers: { "X-Requested-With": "XMLHttpRequest" },
      });
      if (response.ok && response.headers.get("X-DRL-Rows") === "1") {
        live.innerHTML = await response.text();
        shownAt = performance.now();
        live.classList.remove("drl-stale");
      } else {
        live.classList.add("drl-stale"); // logged out, or the server failed: keep what we have
      }
    } catch (error) {
      live.classList.add("drl-stale");
    } finally {
      busy = false;
      countdowns();
    }
  }

  countdowns();
  if (live === null) {
    setInterval(countdowns, 200); // the confirmation page: its one countdown
    return;
  }
  const period = Number(live.dataset.refreshSeconds) * 1000;
  setInterval(function () {
    const due = countdowns();
    const since = performance.now() - lastRefresh;
    if (since >= period || (due && since >= 500)) {
      refresh();
    }
  }, 200);
})();
