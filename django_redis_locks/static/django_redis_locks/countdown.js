/* Live "expires in" countdowns: each .drl-countdown counts down from its data-ttl-ms. */
"use strict";
(function () {
  const started = performance.now();
  const counters = Array.from(document.querySelectorAll(".drl-countdown[data-ttl-ms]"));
  if (!counters.length) {
    return;
  }
  function render() {
    const elapsed = performance.now() - started;
    for (const counter of counters) {
      const left = Math.max(0, Number(counter.dataset.ttlMs) - elapsed) / 1000;
      counter.textContent = left > 0 ? left.toFixed(1) + " s" : "expired";
      counter.classList.toggle("drl-expired", left <= 0);
    }
  }
  render();
  setInterval(render, 200);
})();
