module hostfirst

go 1.19
