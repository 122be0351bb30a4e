module github.com/hostfirst/hostfirst/bindings/go

go 1.19
