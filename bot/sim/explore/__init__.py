"""The explorer: searches the timelines a runbook can meet (world events between its ticks,
people who are late, wrong or absent, workers that die) for one that breaks a safety invariant,
shrinks what it finds, and saves it as a case the tests replay. ``runbook-bot sim explore``."""
