"""A minimal Django project for the decorator benchmark (item 7): settings and two views."""
