"""What every service is built on: the ROUTER service loop, settings, periodic loops."""
