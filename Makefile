# Bootstrap Makefile; the full one replaces it.
.PHONY: test
test:
	go test -count=1 ./...
