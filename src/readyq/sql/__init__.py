"""SQLAlchemy Core builders. They build statements and never execute them."""
