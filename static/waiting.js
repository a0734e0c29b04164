// Concert waiting page: keeps the visitor's place fresh by polling /queue/status and
// reloads the page when it is their turn. Runs under a self-only CSP, so every bit of
// behaviour lives here and the markup carries no inline code.
(function () {
  'use strict';

  var STATUS_URL = '/queue/status';
  var CONFIG_URL = '/_concert/config';
  var REQUEST_TIMEOUT_MS = 8000;
  var BASE_DELAY_MS = 2000;
  var MAX_DELAY_MS = 10000;
  var MAX_BACKOFF_STEPS = 3;
  var JITTER_MS = 300;
  // The server answers 429 to polls less than a second apart; wait well past that.
  var THROTTLED_DELAY_MS = 3000;
  var THROTTLED_SPREAD_MS = 500;
  // Refocusing a tab polls early only if the last poll is this old (browsers slow
  // timers in background tabs), which also keeps clear of the 1 s throttle.
  var REFOCUS_POLL_AFTER_MS = 5000;
  // Screen readers hear position changes at most this often, except near the front.
  var ANNOUNCE_EVERY_MS = 20000;
  var ANNOUNCE_ALWAYS_WITHIN = 5;
  // The waiting clock survives reloads of this tab unless the visitor was gone longer
  // than a ticket lives (then they are in line afresh).
  var CLOCK_KEY = 'concert.waiting-clock';
  var CLOCK_STALE_MS = 5 * 60 * 1000;

  var room = document.getElementById('room');
  if (!room) {
    return;
  }

  function byId(id) {
    return document.getElementById(id);
  }

  var el = {
    headline: byId('headline'),
    position: byId('position'),
    positionSpoken: byId('position-spoken'),
    clock: byId('clock'),
    estimate: byId('estimate'),
    connection: byId('connection'),
    connectionText: byId('connection-text'),
    skip: byId('skip'),
    skipPrice: byId('skip-price'),
    skipLink: byId('skip-link'),
    fastlaneLink: byId('fastlane-link'),
    fastlaneOffer: byId('fastlane-offer'),
    fastlaneTerms: byId('fastlane-terms'),
    fastlaneTermsLink: byId('fastlane-terms-link'),
    cookiesNotice: byId('notice-cookies'),
    unavailableNotice: byId('notice-unavailable'),
    announce: byId('announce'),
    alert: byId('alert')
  };

  var state = {
    stopped: false,
    failures: 0,
    timer: 0,
    clockTimer: 0,
    inFlight: null,
    lastPollAt: 0,
    position: parsePosition(el.position && el.position.textContent),
    hasPass: false,
    skipCost: NaN,
    config: null,
    connection: 'pending',
    lastAnnouncedPosition: null,
    lastAnnouncedAt: 0,
    clockStart: Date.now()
  };

  // ---- utilities -----------------------------------------------------------

  function setText(node, text) {
    if (node && node.textContent !== text) {
      node.textContent = text;
    }
  }

  function show(node, visible) {
    if (node) {
      node.hidden = !visible;
    }
  }

  function parsePosition(text) {
    var n = Number(String(text || '').trim());
    return Number.isInteger(n) && n > 0 ? n : null;
  }

  function padPosition(n) {
    if (n === null) {
      return '…';
    }
    var digits = String(n);
    while (digits.length < 3) {
      digits = '0' + digits;
    }
    return digits;
  }

  function announce(text, urgent) {
    var region = urgent ? el.alert : el.announce;
    if (!region) {
      return;
    }
    // Clearing first makes a repeated message be read again.
    region.textContent = '';
    window.setTimeout(function () {
      region.textContent = text;
    }, 50);
  }

  function hasProbeCookie() {
    if (navigator.cookieEnabled === false) {
      return false;
    }
    return document.cookie.split(';').some(function (pair) {
      return pair.split('=')[0].trim() === 'room_probe';
    });
  }

  // Links come from operator settings; still, only follow http(s) or same-site paths.
  function safeLink(value) {
    if (typeof value !== 'string' || value === '' || value.length > 2048) {
      return '';
    }
    if (value.charAt(0) === '/') {
      return value;
    }
    try {
      var url = new URL(value);
      return url.protocol === 'https:' || url.protocol === 'http:' ? value : '';
    } catch (err) {
      return '';
    }
  }

  // ---- waiting clock -------------------------------------------------------

  function readStoredClock(now) {
    try {
      var saved = JSON.parse(window.sessionStorage.getItem(CLOCK_KEY) || 'null');
      if (saved && typeof saved.since === 'number' && typeof saved.seen === 'number' &&
          saved.since <= now && now - saved.seen < CLOCK_STALE_MS) {
        return saved.since;
      }
    } catch (err) {
      // Storage can be blocked; the clock then simply starts at page load.
    }
    return now;
  }

  function storeClock(keep) {
    try {
      if (keep) {
        window.sessionStorage.setItem(CLOCK_KEY,
          JSON.stringify({ since: state.clockStart, seen: Date.now() }));
      } else {
        window.sessionStorage.removeItem(CLOCK_KEY);
      }
    } catch (err) {
      // Not essential.
    }
  }

  function tickClock() {
    var seconds = Math.max(0, Math.floor((Date.now() - state.clockStart) / 1000));
    var minutes = Math.floor(seconds / 60);
    var rest = seconds % 60;
    setText(el.clock, (minutes < 10 ? '0' : '') + minutes + ':' + (rest < 10 ? '0' : '') + rest);
  }

  // ---- what the visitor sees ----------------------------------------------

  function showPosition(n) {
    state.position = n;
    setText(el.position, padPosition(n));
    var spoken = n === null ? 'Checking your place in line.'
      : n === 1 ? 'You are next in line.'
      : 'You are number ' + n + ' in line.';
    setText(el.positionSpoken, spoken);

    var now = Date.now();
    if (n !== null && n !== state.lastAnnouncedPosition &&
        (n <= ANNOUNCE_ALWAYS_WITHIN || now - state.lastAnnouncedAt >= ANNOUNCE_EVERY_MS)) {
      state.lastAnnouncedPosition = n;
      state.lastAnnouncedAt = now;
      announce(spoken, false);
    }
  }

  function unitCount(seconds, round) {
    if (seconds < 3600) {
      var minutes = Math.max(1, round(seconds / 60));
      return minutes >= 60 ? { n: 1, unit: 'hour' } : { n: minutes, unit: 'minute' };
    }
    return { n: Math.max(1, round(seconds / 3600)), unit: 'hour' };
  }

  function plural(count) {
    return count.n + ' ' + count.unit + (count.n === 1 ? '' : 's');
  }

  // "about 1–2 minutes": the low end rounded, the high end rounded up so the range is honest.
  function describeWait(minSeconds, maxSeconds) {
    var low = Math.max(0, minSeconds);
    var high = Math.max(low, maxSeconds);
    if (high < 60) {
      return 'less than a minute';
    }
    var from = unitCount(low, Math.round);
    var to = unitCount(high, Math.ceil);
    if (from.unit === to.unit) {
      if (to.n <= from.n) {
        return 'about ' + plural(from);
      }
      return 'about ' + from.n + '–' + plural(to);
    }
    return 'about ' + plural(from) + ' – ' + plural(to);
  }

  function showEstimate(data) {
    var min = Number(data.wait_min_seconds || 0);
    var max = Number(data.wait_max_seconds || 0);
    if (data.wait_known === true && Number.isFinite(min) && Number.isFinite(max) &&
        min >= 0 && max >= 0) {
      setText(el.estimate, describeWait(min, max));
    } else {
      setText(el.estimate, 'estimating…');
    }
  }

  function currentSkipLink() {
    // Once the live config is known it wins over the URL baked into the page at render time.
    if (state.config) {
      return safeLink(state.config.legacy_skip_url);
    }
    return safeLink(room.getAttribute('data-skip-url'));
  }

  function showSkipCard() {
    var waiting = !state.stopped && !state.hasPass;
    var link = currentSkipLink();
    var priced = Number.isFinite(state.skipCost) && state.skipCost > 0 &&
      state.position !== null && state.position > 1;
    var fastlane = waiting && !!state.config && state.config.enabled === true;
    // With a fast lane the skip cost counts offer prices, not money: the lane's card shows it.
    var legacy = waiting && link !== '' && priced && !fastlane;

    if (legacy) {
      el.skipLink.setAttribute('href', link);
      setText(el.skipPrice, 'Current skip price: $' + state.skipCost.toFixed(2));
    }
    show(el.skipLink, legacy);
    show(el.skipPrice, legacy);

    if (fastlane) {
      el.fastlaneLink.setAttribute('href', '/_concert/access?return=' +
        encodeURIComponent(window.location.pathname + window.location.search));
    }
    show(el.fastlaneLink, fastlane);
    var offer = fastlane ? describeOffer(state.config, priced ? state.skipCost : 0) : '';
    setText(el.fastlaneOffer, offer);
    show(el.fastlaneOffer, offer !== '');
    var terms = fastlane ? safeLink(state.config.terms_url) : '';
    if (terms !== '') {
      el.fastlaneTermsLink.setAttribute('href', terms);
    }
    show(el.fastlaneTerms, terms !== '');
    show(el.skip, legacy || fastlane);
  }

  // Smallest units per whole coin, by network family, for the offer's price.
  var COIN_DECIMALS = { xrpl: 6, solana: 9, stellar: 7, hedera: 8 };
  var COIN_NAMES = { xrpl: 'XRP', solana: 'SOL', stellar: 'XLM', hedera: 'HBAR' };

  // An amount in smallest units as coins, by string arithmetic (amounts exceed 2^53).
  function coins(atomic, network) {
    var family = String(network).split(':')[0];
    var places = COIN_DECIMALS[family];
    var digits = String(atomic);
    if (places === undefined || !/^[0-9]+$/.test(digits)) {
      return '';
    }
    while (digits.length <= places) {
      digits = '0' + digits;
    }
    var fraction = digits.slice(digits.length - places).replace(/0+$/, '');
    var whole = digits.slice(0, digits.length - places);
    return whole + (fraction ? '.' + fraction : '') + ' ' + COIN_NAMES[family];
  }

  var MAX_AMOUNT = BigInt('9223372036854775807');

  // An offer's price for a visitor whose skip costs `skipCost` times it, as the server quotes
  // it: the amount plus that multiple, rounded up to a whole unit.
  function pricedAmount(amount, skipCost) {
    if (!/^[0-9]+$/.test(String(amount)) || !(skipCost > 0)) {
      return String(amount);
    }
    var base = BigInt(amount);
    var extra = Math.ceil(Number(amount) * skipCost);
    var total = Number.isFinite(extra) && extra < 9.2e18 ? base + BigInt(extra) : MAX_AMOUNT;
    return (total > MAX_AMOUNT ? MAX_AMOUNT : total).toString();
  }

  // "2 XRP or 0.015 SOL buys 5 minutes in the fast lane": the prices and what they buy. When
  // the line prices skipping it, the prices are this visitor's, for their place in the line.
  function describeOffer(config, skipCost) {
    var offers = Array.isArray(config.offers) ? config.offers : [];
    var prices = [];
    offers.forEach(function (offer) {
      var terms = offer && offer.requirements;
      var price = terms ? coins(pricedAmount(terms.amount, skipCost), terms.network) : '';
      if (price !== '' && prices.indexOf(price) < 0) {
        prices.push(price);
      }
    });
    var seconds = Number(config.pass_seconds);
    if (prices.length === 0 || !Number.isFinite(seconds) || seconds <= 0) {
      return '';
    }
    var minutes = Math.round(seconds / 60);
    var length = seconds < 120 ? seconds + ' seconds' :
      minutes + (minutes === 1 ? ' minute' : ' minutes');
    var sentence = prices.join(' or ') + ' buys ' + length +
      ' in the fast lane, past this line while it lasts.';
    return skipCost > 0 ? 'For your place in the line, ' + sentence : sentence;
  }

  function setConnection(tone) {
    var previous = state.connection;
    state.connection = tone;
    el.connection.setAttribute('data-tone', tone);
    room.setAttribute('data-state', tone === 'reconnecting' ? 'reconnecting' : 'waiting');
    if (tone === 'reconnecting') {
      setText(el.connectionText, 'Reconnecting…');
      if (previous !== 'reconnecting') {
        announce('Connection lost. Reconnecting…', false);
      }
    } else {
      setText(el.connectionText, 'Live — your place updates automatically.');
      if (previous === 'reconnecting') {
        announce('Reconnected.', false);
      }
    }
  }

  // ---- polling -------------------------------------------------------------

  function stop() {
    state.stopped = true;
    window.clearTimeout(state.timer);
    state.timer = 0;
    window.clearInterval(state.clockTimer);
    state.clockTimer = 0;
    if (state.inFlight) {
      state.inFlight.abort();
      state.inFlight = null;
    }
  }

  function schedule(delayMs) {
    if (state.stopped) {
      return;
    }
    window.clearTimeout(state.timer);
    state.timer = window.setTimeout(poll, delayMs);
  }

  function backoffDelay() {
    var steps = Math.min(state.failures, MAX_BACKOFF_STEPS);
    return Math.min(MAX_DELAY_MS, BASE_DELAY_MS * Math.pow(2, steps)) +
      Math.random() * JITTER_MS;
  }

  function finish(kind) {
    stop();
    storeClock(false);
    room.setAttribute('data-state', kind);
    show(el.skip, false);
    if (kind === 'ready') {
      setText(el.headline, "It's your turn");
      el.connection.setAttribute('data-tone', 'ready');
      setText(el.connectionText, 'Taking you in…');
      announce("It's your turn. Taking you in.", true);
      window.location.reload();
      return;
    }
    var notice = kind === 'cookies' ? el.cookiesNotice : el.unavailableNotice;
    var title = kind === 'cookies' ? 'Cookies are required' : 'This page is unavailable';
    setText(el.headline, title);
    show(notice, true);
    announce(title + '. ' + (notice ? notice.textContent.replace(/\s+/g, ' ').trim() : ''), true);
  }

  function applyStatus(data) {
    if (!data || typeof data !== 'object') {
      throw new Error('status answer is not an object');
    }
    if (data.ready === true) {
      finish('ready');
      return;
    }
    if (data.cookies_required === true) {
      finish('cookies');
      return;
    }
    state.failures = 0;
    setConnection('live');
    state.hasPass = data.has_pass === true;
    state.skipCost = typeof data.skip_cost === 'number' ? data.skip_cost : NaN;
    showPosition(parsePosition(data.position));
    showEstimate(data);
    showSkipCard();
    storeClock(true);
    schedule(backoffDelay());
  }

  function poll() {
    if (state.stopped || state.inFlight) {
      return;
    }
    state.timer = 0;
    state.lastPollAt = Date.now();
    var controller = new AbortController();
    state.inFlight = controller;
    var timeout = window.setTimeout(function () {
      controller.abort();
    }, REQUEST_TIMEOUT_MS);

    fetch(STATUS_URL, {
      method: 'GET',
      credentials: 'same-origin',
      cache: 'no-store',
      headers: { Accept: 'application/json' },
      signal: controller.signal
    }).then(function (response) {
      if (response.status === 403) {
        return 'unavailable';
      }
      if (response.status === 429) {
        return 'throttled';
      }
      if (!response.ok) {
        throw new Error('status ' + response.status);
      }
      return response.json();
    }).then(function (result) {
      window.clearTimeout(timeout);
      state.inFlight = null;
      if (state.stopped) {
        return;
      }
      if (result === 'unavailable') {
        finish('unavailable');
      } else if (result === 'throttled') {
        schedule(THROTTLED_DELAY_MS + Math.random() * THROTTLED_SPREAD_MS);
      } else {
        applyStatus(result);
      }
    }).catch(function () {
      window.clearTimeout(timeout);
      if (state.inFlight === controller) {
        state.inFlight = null;
      }
      if (state.stopped) {
        return;
      }
      state.failures += 1;
      setConnection('reconnecting');
      schedule(backoffDelay());
    });
  }

  function loadConfig() {
    var controller = new AbortController();
    var timeout = window.setTimeout(function () {
      controller.abort();
    }, REQUEST_TIMEOUT_MS);
    fetch(CONFIG_URL, {
      credentials: 'same-origin',
      cache: 'no-store',
      headers: { Accept: 'application/json' },
      signal: controller.signal
    }).then(function (response) {
      return response.ok ? response.json() : null;
    }).then(function (config) {
      window.clearTimeout(timeout);
      if (config && typeof config === 'object') {
        state.config = config;
        showSkipCard();
      }
    }).catch(function () {
      // Without the config the link rendered into the page is used.
      window.clearTimeout(timeout);
    });
  }

  // ---- start ---------------------------------------------------------------

  // Once the script runs, the spoken text stands in for the zero-padded digits.
  if (el.position) {
    el.position.setAttribute('aria-hidden', 'true');
  }
  showPosition(state.position);

  window.addEventListener('pageshow', function (event) {
    // A page restored from the back/forward cache has stale state and no polling.
    if (event.persisted) {
      window.location.reload();
    }
  });

  if (!hasProbeCookie()) {
    finish('cookies');
    return;
  }

  state.clockStart = readStoredClock(Date.now());
  tickClock();
  state.clockTimer = window.setInterval(tickClock, 1000);

  window.addEventListener('pagehide', stop);
  document.addEventListener('visibilitychange', function () {
    if (document.visibilityState === 'visible' && !state.stopped && !state.inFlight &&
        Date.now() - state.lastPollAt >= REFOCUS_POLL_AFTER_MS) {
      schedule(0);
    }
  });

  loadConfig();
  poll();
})();
