"""Consumer services: one package per service, each run by ``runtrail run NAME``."""
