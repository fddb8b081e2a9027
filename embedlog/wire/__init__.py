"""What travels between clients and bookies: the request/response codec and the entry format."""
